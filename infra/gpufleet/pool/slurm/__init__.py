"""Slurm as the scheduling pool: configuration from the plan (`conf`), the adapter (`adapter`, with
`nodes` for how state is written in Slurm and `cli` for bounded commands), the real cluster's files
for the `slurm` role (`files`) and a real local Slurm for simulated stacks (`local`)."""
