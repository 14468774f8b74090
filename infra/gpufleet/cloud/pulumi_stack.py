"""A project's Pulumi stack through the Automation API, selected the way the `pulumi` CLI selects it.

Why work_dir = the project's root: the CLI then reads its Pulumi.yaml (a `backend.url` included)
and honours PULUMI_BACKEND_URL from the environment like `pulumi` itself. Shared by the rollout's
provisioner (gpufleet.rollout.pulumi_provisioner) and the Slurm pool's client
(gpufleet.pool.factory), which needs only the stack's outputs.
"""

from __future__ import annotations

from typing import Any

from gpufleet.project import Project


def select_stack(project: Project, stack: str, pulumi_command: Any = None) -> Any:
    """`stack` of the project, selected (a `pulumi.automation.Stack`); raises the Automation API's
    CommandError for a missing stack or backend, OSError without the CLI."""
    from pulumi import automation as auto

    workspace = auto.LocalWorkspace(work_dir=str(project.root), pulumi_command=pulumi_command)
    return auto.Stack.select(stack, workspace)


def output_values(stack: Any) -> dict[str, Any]:
    """The stack's outputs as of its last update (`bucket`, `slurmControllerIp`, ...), plain values."""
    return {name: getattr(out, "value", out) for name, out in stack.outputs().items()}
