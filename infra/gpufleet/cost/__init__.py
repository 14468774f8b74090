"""Cost and utilisation reports: GPU-hours per partition, team and job, priced, and the capacity held but unused."""
