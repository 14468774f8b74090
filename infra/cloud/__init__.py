"""Pulumi components for AWS: network, identity, EKS, compute (EFA batches), storage.

Every resource is derived from the plan (`infra.plan.build_plan`); `program.build_cluster`
wires the components together and is what `infra/__main__.py` and the offline preview run.
"""
