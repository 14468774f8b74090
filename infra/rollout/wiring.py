"""Which adapters a stack's rollout runs on: the simulator for simulated stacks, the real cloud else.

Why one place: the orchestrator cannot tell the adapters apart; only this module knows that a
`gpufleet:simulator` key means the embedded cloud (`infra.sim`), and that a real stack means Pulumi
(Automation API) and Ansible; the pool is the stack's (`infra.pool.factory.pool_for`) either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.bom import load_bom
from infra.errors import ConfigError
from infra.gates import versions as gate_versions
from infra.gates.settings import GateSettings
from infra.plan.model import ClusterPlan
from infra.project import Project
from infra.rollout.orchestrator import Adapters, Options
from infra.rollout.ports import WallClock
from infra.spec import ClusterSpec


@dataclass
class Wiring:
    adapters: Adapters
    threaded: bool  # real adapters provision ahead in a worker thread; the simulator models it
    simulator: Any | None = None  # infra.sim.cloud.SimulatedCloud (its ledger and ground truth)


def gate_settings(spec: ClusterSpec, project: Project) -> GateSettings:
    """The gates' expectations for this stack: SKU, the BOM's versions for the stack's OS and pool, its digest."""
    bom = load_bom(project.path(spec.image.bom))
    if spec.image.os not in bom.os:
        raise ConfigError(f"the BOM pins nothing for the stack's node OS {spec.image.os}",
                          path=str(project.path(spec.image.bom)), field=f"os.{spec.image.os}",
                          expected="one of " + ", ".join(bom.os))
    by_os = gate_versions.expectations_by_os(bom, spec.pool.type, spec.image.os)
    return GateSettings.from_config(spec.gates, spec.cluster.instance_type, bom_digest=bom.digest(),
                                    expected_by_os=by_os, pool=spec.pool.type)


def options(spec: ClusterSpec, until_batch: int | None, threaded: bool) -> Options:
    r = spec.rollout
    return Options(until_batch=until_batch, pipelining=r.pipelining, threaded=threaded,
                   replace_action=r.replace_action, max_failure_rate=r.max_failure_rate,
                   canary_max_failure_rate=r.canary_max_failure_rate,
                   message_bytes=spec.gates.baseline_message_bytes)


def wire(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str) -> Wiring:
    if spec.simulated:
        from infra.sim.cloud import SimulatedCloud

        cloud = SimulatedCloud.open(spec, plan, project, stack)
        pool = _pool(spec, plan, project, stack, cloud.launcher)
        return Wiring(Adapters(cloud.provisioner, cloud.executor, pool, cloud.clock), threaded=False,
                      simulator=cloud)
    from infra.configure.executor import stack_executor
    from infra.configure.inventory import SshConnection

    try:
        from infra.rollout.pulumi_provisioner import PulumiProvisioner  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(f"the Pulumi provisioner is not available here ({exc})", field="gpufleet:simulator",
                          expected="a simulated stack, or an installation with infra.rollout.pulumi_provisioner"
                          ) from None
    provisioner = PulumiProvisioner.for_stack(spec, project, stack)
    user = "ec2-user" if spec.image.os == "al2023" else "ubuntu"  # the AMI families' default login
    executor = stack_executor(spec, project, stack, SshConnection(user=user))
    pool = _pool(spec, plan, project, stack, None)
    return Wiring(Adapters(provisioner, executor, pool, WallClock()), threaded=True)


def _pool(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str, launcher: Any) -> Any:
    """The stack's pool; on a simulated stack its multi-node runs go to the simulator's fabric model."""
    from infra.pool.factory import pool_for

    return pool_for(spec, project, stack, launcher=launcher, plan=plan)
