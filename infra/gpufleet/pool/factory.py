"""Which Pool adapter a stack gets: one decision, shared by `gpufleet pool` and the rollout.

- `pool.type: sim` -> the simulator's file pool under the stack's state dir.
- `pool.type: slurm` on a simulated stack (`local-slurm`) -> the real local Slurm that
  `gpufleet pool up` started under the stack's state dir (its own SLURM_CONF).
- `pool.type: slurm` on a real stack -> the Slurm adapter, its commands run on the stack's
  controller (the `slurmControllerIp` / `slurmControllerInstanceId` outputs) over the stack's
  `gpufleet:configure` connection: SSH (through its bastion) or SSM Run Command. On the
  controller or a login node itself, `GPUFLEET_SLURM_CLIENT=local` runs them right there.
- `pool.type: kubernetes` -> the Kubernetes adapter (imported only then: it needs the
  `kubernetes` client and a kubeconfig).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from gpufleet.errors import ConfigError, PoolError
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.protocol import Launcher, Pool
from gpufleet.pool.slurm.files import target_slurm_version
from gpufleet.project import Project
from gpufleet.spec import ClusterSpec

if TYPE_CHECKING:
    from gpufleet.pool.slurm.cli import SlurmCli
    from gpufleet.pool.slurm.transport import Transport

SLURM_DIR = "slurm"
SLURM_CLIENT_ENV = "GPUFLEET_SLURM_CLIENT"  # "local": this machine is the controller or a login node
Outputs = Callable[[], Mapping[str, Any]]


def local_slurm_root(project: Project, stack: str) -> Path:
    return project.state_dir(stack) / SLURM_DIR


def pool_for(spec: ClusterSpec, project: Project, stack: str, *, launcher: Launcher | None = None,
             plan: ClusterPlan | None = None, outputs: Outputs | None = None) -> Pool:
    """The stack's pool. `launcher` replaces the adapter's own (the simulator's fabric model).
    `outputs`: the stack's Pulumi outputs when the caller has them (the rollout's provisioner);
    else a real Slurm stack reads them from Pulumi at its first command."""
    if spec.pool.type == "sim":
        from gpufleet.plan import build_plan
        from gpufleet.pool.sim import SimPool

        plan = plan or build_plan(spec)
        return SimPool(project.state_dir(stack) / "pool.json", launcher,
                       failures_before_blacklist=spec.rollout.failures_before_blacklist,
                       slots=[n.name for n in plan.nodes], partitions=[p.name for p in plan.partitions])
    if spec.pool.type == "slurm":
        from gpufleet.pool.slurm.adapter import SlurmPool

        if spec.simulated:
            from gpufleet.pool.slurm.local import LocalSlurm, slurm_version

            local = LocalSlurm(local_slurm_root(project, stack))
            if not local.running():
                raise PoolError(f"the local Slurm of stack {stack!r} is not running; start it with "
                                f"`gpufleet pool up -s {stack}`")
            from gpufleet.plan import build_plan

            # a node drained outside gpufleet (by hand, or by Slurm) is no broken cluster: the pool shows
            # it quarantined slurm-drain with its reason (issue 22: a hand drain is seen and kept)
            problems = local.problems([n.name for n in (plan or build_plan(spec)).nodes], drains=False)
            if problems:  # slurmctld alone answers for nodes whose slurmd are gone: that is no pool
                raise PoolError(f"the local Slurm of stack {stack!r} is unhealthy: {'; '.join(problems)}; restart it "
                                f"with `gpufleet pool up -s {stack} --clean`")
            return SlurmPool(local.cli(), version=slurm_version(), set_node_addresses=False,
                             failures_before_blacklist=spec.rollout.failures_before_blacklist, launcher=launcher)
        return SlurmPool(real_slurm_cli(spec, project, stack, outputs), version=target_slurm_version(spec, project),
                         failures_before_blacklist=spec.rollout.failures_before_blacklist, launcher=launcher)
    if spec.pool.type == "kubernetes":
        try:
            from gpufleet.pool.kubernetes import adapter as kubernetes_adapter
            make = kubernetes_adapter.pool_for
        except (ImportError, AttributeError) as exc:
            raise PoolError(f"the Kubernetes pool adapter is not available in this installation ({exc})") from None
        return make(spec, project, stack, launcher=launcher, plan=plan)
    raise PoolError(f"no pool adapter for pool.type {spec.pool.type!r}")


def real_slurm_cli(spec: ClusterSpec, project: Project, stack: str, outputs: Outputs | None = None) -> "SlurmCli":
    """The Slurm client of a real stack: on this machine when GPUFLEET_SLURM_CLIENT=local, else on
    the stack's controller, reached at the first command (the controller exists only once the
    first batch's update ran, and `gpufleet pool` must not touch Pulumi before it needs to)."""
    from gpufleet.pool.slurm.cli import SlurmCli
    from gpufleet.pool.slurm.transport import FirstUseTransport

    choice = os.environ.get(SLURM_CLIENT_ENV, "")
    if choice == "local":
        return SlurmCli()
    if choice:
        raise ConfigError(f"{SLURM_CLIENT_ENV}={choice!r} is not a Slurm client choice", field=SLURM_CLIENT_ENV,
                          expected="'local' (run Slurm's commands on this machine: the controller or a login node), "
                                   "or unset (reach the stack's controller over its gpufleet:configure connection)")
    read = outputs or (lambda: _pulumi_outputs(spec, project, stack))
    return SlurmCli(transport=FirstUseTransport(lambda: controller_transport(spec, project, stack, read()),
                                                f"the Slurm controller of stack {stack!r}"))


def controller_transport(spec: ClusterSpec, project: Project, stack: str, outputs: Mapping[str, Any]) -> "Transport":
    """SSH to the controller's private IP (through the configured bastion) or SSM to its instance."""
    from gpufleet.configure.inventory import SshConnection, SsmConnection
    from gpufleet.configure.stack_connection import slurm_controller
    from gpufleet.pool.slurm.transport import SshTransport, SsmTransport

    connection, host = slurm_controller(spec, outputs, project)
    if isinstance(connection, SsmConnection):
        import boto3

        return SsmTransport(str(host.instance_id), boto3.client("ssm", region_name=connection.region),
                            s3=boto3.client("s3", region_name=connection.region), bucket=connection.bucket)
    assert isinstance(connection, SshConnection)
    known_hosts = project.state_dir(stack) / "ssh" / "known_hosts"  # this stack's controller, accepted once
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    # the shared connection's socket: a unix socket path must stay under ~100 bytes, so not in the project
    sockets = Path(tempfile.gettempdir()) / f"gpufleet-ssh-{os.getuid()}"
    sockets.mkdir(mode=0o700, exist_ok=True)
    mine = sockets.stat().st_uid == os.getuid() and not sockets.stat().st_mode & 0o077  # else: one connection each
    return SshTransport(host=host.address, user=connection.user, port=connection.port,
                        key_file=connection.private_key_file, proxy_jump=connection.proxy_jump,
                        known_hosts=known_hosts, connect_timeout_s=connection.connect_timeout_s,
                        control_path=str(sockets / "cm-%C") if mine else None)


def _pulumi_outputs(spec: ClusterSpec, project: Project, stack: str) -> Mapping[str, Any]:
    from pulumi.automation.errors import CommandError

    from gpufleet.cloud.pulumi_stack import output_values, select_stack

    try:
        return output_values(select_stack(project, stack))
    except (CommandError, OSError) as exc:  # no such stack, no backend login, no pulumi CLI
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PoolError(f"cannot read the Pulumi outputs of stack {stack!r}, which name its Slurm controller "
                        f"({first}); check the Pulumi CLI and backend, or on the controller itself set "
                        f"{SLURM_CLIENT_ENV}=local") from None

