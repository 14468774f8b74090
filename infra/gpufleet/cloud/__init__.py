"""Pulumi components for AWS: network, identity, EKS or the Slurm controller, compute (EFA batches), storage.

Every resource is derived from the plan (`gpufleet.plan.plan_stack`); `gpufleet.program` wires the
components together with the pool's objects (`infra/__main__.py` runs it for `pulumi up`, its
`capture` under mocks for the offline preview, the tests and the simulator). `staging` (pure)
decides which slots have instances; `recorded` reads what the stack deployed last.
"""
