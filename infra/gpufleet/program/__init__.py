"""The Pulumi program: the cloud components and the pool's Kubernetes objects composed per stack.

It sits above `cloud/` and `pool/` because it is the one place that wires both (an EKS pool's
Kueue and monitoring objects are the pool's); `capture` runs it under mocks, `snapshot` and
`preview` read that capture. The entry files (`infra/__main__.py`, a project's `__main__.py`)
call `cluster.run_program`.
"""
