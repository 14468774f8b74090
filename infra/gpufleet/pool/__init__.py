"""The scheduling pool: where admitted nodes take work (Kubernetes with Kueue, Slurm, or the simulator).

`protocol.Pool` is the port the rollout drives; each adapter (kubernetes/, slurm/, sim) keeps the
same semantics, proven by one contract test suite.
"""
