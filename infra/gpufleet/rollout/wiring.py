"""Which adapters a stack's rollout runs on: the simulator for simulated stacks, the real cloud else.

Why one place: the orchestrator cannot tell the adapters apart; only this module knows that a
`gpufleet:simulator` key means the embedded cloud (`gpufleet.sim`), and that a real stack means Pulumi
(Automation API) and Ansible; the pool is the stack's (`gpufleet.pool.factory.pool_for`) either way.

A real stack's Executor needs the stack's outputs (the SSM bucket, the Slurm controller and its
munge secret), which exist only once the first batch's update ran: it is built at its first call
(`_FirstUseExecutor`), from `gpufleet:configure` and those outputs (`real_executor`); the first
call is the storage clients' configure, after the base's update (`gpufleet.rollout.storage_base`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from gpufleet.bom import load_bom
from gpufleet.configure.stack_connection import connection_for, controller_host, stack_output
from gpufleet.errors import ConfigError
from gpufleet.gates import versions as gate_versions
from gpufleet.gates.settings import GateSettings
from gpufleet.plan.model import ClusterPlan
from gpufleet.plan.window import window_budget
from gpufleet.project import Project
from gpufleet.ports import Executor, HostOutcome, Instance, RemediateAction, StageResult, WallClock
from gpufleet.rollout.run_config import Adapters, Options
from gpufleet.rollout.timeline import Window
from gpufleet.spec import ClusterSpec

if TYPE_CHECKING:
    from gpufleet.configure.executor import AnsibleExecutor


@dataclass
class Wiring:
    adapters: Adapters
    threaded: bool  # real adapters: port calls in worker threads (gpufleet.rollout.window_threads); the simulator models it
    simulator: Any | None = None  # gpufleet.sim.cloud.SimulatedCloud (its ledger and ground truth)
    # a real stack's storage and network base checks (acceptance.yml through the executor); the
    # simulator's stages keep gpufleet.sim.acceptance's collector (gpufleet.rollout.acceptance.stack_hooks)
    acceptance: Any | None = None  # gpufleet.rollout.acceptance_collect.PlaybookAcceptanceCollector
    # a Pulumi stack's storage clients, where its storage base check runs before the first batch
    storage_clients: Any | None = None  # gpufleet.rollout.storage_base.StorageClientsBase
    # a Pulumi stack's engine steps of `up`, to be pointed at the run's display (`EngineRelay.to`)
    engine: "EngineRelay | None" = None


class EngineRelay:
    """The provisioner's progress callback, pointed at the display once the run has one.

    Why a relay: the provisioner is built before the display (the display needs the plan's run,
    the run needs the wiring); an engine step before that (none today) goes to the module's logger."""

    def __init__(self) -> None:
        self._to: Callable[[Any], None] | None = None

    def to(self, target: Callable[[Any], None]) -> None:
        self._to = target

    def __call__(self, step: Any) -> None:
        if self._to is not None:
            self._to(step)
            return
        import logging

        logging.getLogger(__name__).info("pulumi %s %s %s", step.status, step.op, step.slot or step.urn)


def srun_mpi(spec: ClusterSpec) -> str:
    """`srun --mpi=` of the gates' multi-node runs: the stack's `pool.srunMpi`; on a local Slurm (srun
    runs on this machine) pmi2 when that is PMIx and this Slurm cannot load it (`gpufleet pool up`
    says so: SLURM_PMIX_NOT_LOADABLE). A real head node has the PMIx the slurm role installs."""
    if spec.pool.type != "slurm" or not spec.simulated:
        return spec.pool.srun_mpi
    from gpufleet.pool.slurm.mpi import choose_srun_mpi, pmix_library, pmix_loadable

    return choose_srun_mpi(spec.pool.srun_mpi, pmix_loadable(), pmix_library())[0]


def gate_settings(spec: ClusterSpec, project: Project) -> GateSettings:
    """The gates' expectations for this stack: SKU, the BOM's versions for the stack's OS and pool, its digest."""
    bom = load_bom(project.path(spec.image.bom))
    if spec.image.os not in bom.os:
        raise ConfigError(f"the BOM pins nothing for the stack's node OS {spec.image.os}",
                          path=str(project.path(spec.image.bom)), field=f"os.{spec.image.os}",
                          expected="one of " + ", ".join(bom.os))
    by_os = gate_versions.expectations_by_os(bom, spec.pool.type, spec.image.os)
    return GateSettings.from_config(spec.gates, spec.cluster.instance_type, bom_digest=bom.digest(),
                                    expected_by_os=by_os, pool=spec.pool.type, srun_mpi=srun_mpi(spec),
                                    workload_image=spec.acceptance.workload_image)


def options(spec: ClusterSpec, until_batch: int | None, threaded: bool, plan: ClusterPlan | None = None) -> Options:
    """The run's options from the stack; with the plan, post-canary batches in flight together
    within the plan's budget (gpufleet.plan.window) where the stack pipelines: on the simulator's
    ports one action at a time, the overlap modelled; on a threaded (real) stack each batch in
    flight in its own worker thread, its port calls made side by side (gpufleet.rollout.window_threads)."""
    r = spec.rollout
    window = None
    if plan is not None and r.pipelining:
        budget = window_budget(plan, r.max_batches_in_flight, r.max_fabric_tests)
        window = Window(batches=budget.batches_in_flight, fabric_tests=budget.fabric_tests,
                        fabric_physical=budget.fabric_is_physical,
                        fabric_limit=None if budget.fabric_is_physical else budget.fabric_limit)
    return Options(until_batch=until_batch, pipelining=r.pipelining, threaded=threaded, window=window,
                   replace_action=r.replace_action, max_failure_rate=r.max_failure_rate,
                   canary_max_failure_rate=r.canary_max_failure_rate,
                   message_bytes=spec.gates.baseline_message_bytes,
                   drain_timeout_s=spec.upgrade.drain_timeout_s, drain_poll_s=1.0 if spec.simulated else 5.0)


def wire(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str) -> Wiring:
    if spec.simulated:
        from gpufleet.sim.cloud import SimulatedCloud

        cloud = SimulatedCloud.open(spec, plan, project, stack)
        if spec.pool.type == "slurm":  # local-slurm: each run a real srun printing the simulator's output
            from gpufleet.pool.slurm.adapter import SlurmLauncher
            from gpufleet.sim.srun_relay import SrunRelayLauncher, partitions_of

            relay = SrunRelayLauncher(cloud.launcher, project.state_dir(stack) / "srun-relay", partitions_of(plan))
            pool = _pool(spec, plan, project, stack, relay)
            relay.bind(SlurmLauncher(pool.cli))
        else:
            pool = _pool(spec, plan, project, stack, cloud.launcher)
        return Wiring(Adapters(cloud.provisioner, cloud.executor, pool, cloud.clock), threaded=False,
                      simulator=cloud)
    try:
        from gpufleet.rollout.pulumi_provisioner import PulumiProvisioner  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(f"the Pulumi provisioner is not available here ({exc})", field="gpufleet:simulator",
                          expected="a simulated stack, or an installation with gpufleet.rollout.pulumi_provisioner"
                          ) from None
    from gpufleet.rollout.storage_base import StorageClientsBase

    engine = EngineRelay()
    provisioner = PulumiProvisioner.for_stack(spec, project, stack, progress=engine)
    if resized(spec, plan):  # grown or shrunk: the program runs on this layout, not its own fresh one
        provisioner.take_layout(plan)
    executor = _FirstUseExecutor(lambda: real_executor(spec, plan, project, stack, provisioner.outputs()))
    pool = _pool(spec, plan, project, stack, None, outputs=provisioner.outputs)
    clients = StorageClientsBase(provisioner, executor,
                                 lambda: storage_client_vars(spec, project, provisioner.outputs()))
    return Wiring(Adapters(provisioner, executor, pool, WallClock()), threaded=True,
                  acceptance=acceptance_collector(spec, executor,
                                                  lambda: {**provisioner.inventory(), **clients.inventory()}),
                  storage_clients=clients, engine=engine)


def resized(spec: ClusterSpec, plan: ClusterPlan) -> bool:
    """The plan is not the one the stack file lays out afresh (a rollout grew or shrank it by whole
    blocks), or the stack already carries the rollout's layout (then it is kept up to date)."""
    from gpufleet.plan import build_plan
    from gpufleet.plan.resize import layout_digest

    return spec.rollout.layout is not None or layout_digest(plan.nodes) != layout_digest(build_plan(spec).nodes)


def _pool(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str, launcher: Any,
          outputs: Callable[[], Mapping[str, Any]] | None = None) -> Any:
    """The stack's pool; on a simulated stack its multi-node runs go to the simulator's fabric model;
    on a real one it reaches the Slurm controller named in the provisioner's `outputs`."""
    from gpufleet.pool.factory import pool_for

    return pool_for(spec, project, stack, launcher=launcher, plan=plan, outputs=outputs)


# --- the real Executor ----------------------------------------------------------------------------

class _FirstUseExecutor:
    """The Executor port, built by `build` at its first call (after the first batch's update).

    Batches in flight call it from several threads (gpufleet.rollout.window_threads): it is built
    once, and configure runs are one at a time where they also play the stack's service hosts (the
    Slurm controller takes every batch's slurm.conf: two plays on it at once would race)."""

    def __init__(self, build: Callable[[], Executor]) -> None:
        self._build = build
        self._executor: Executor | None = None
        self._building = threading.Lock()
        self._service_play = threading.Lock()

    def _get(self) -> Executor:
        with self._building:
            if self._executor is None:
                self._executor = self._build()
            return self._executor

    def configure(self, instances: Sequence[Instance]) -> StageResult:
        executor = self._get()
        if not getattr(executor, "service_hosts", ()):
            return executor.configure(instances)
        with self._service_play:
            return executor.configure(instances)

    def preflight(self, instances: Sequence[Instance], dest: Path) -> StageResult:
        return self._get().preflight(instances, dest)

    def remediate(self, instance: Instance, action: RemediateAction) -> HostOutcome:
        return self._get().remediate(instance, action)

    def run_playbook(self, stage: str, instances: Sequence[Instance], playbook: str,
                     extravars: Mapping[str, Any]) -> StageResult:
        return self._get().run_playbook(stage, instances, playbook, extravars)  # type: ignore[attr-defined]


def acceptance_collector(spec: ClusterSpec, runner: Any, inventory: Callable[[], Mapping[str, Instance]]) -> Any:
    """The storage and network base checks of a real stack: `playbooks/acceptance.yml` run by the
    stack's executor on the hosts the provisioner has up, fio against the stack's FSx mount, the
    fabric tests over EFA (libfabric's tcp provider on instance types without EFA)."""
    from gpufleet import catalog
    from gpufleet.plan.storage import TIB
    from gpufleet.rollout.acceptance_collect import NetworkTools, PlaybookAcceptanceCollector

    efa = catalog.get(spec.cluster.instance_type).efa_generation > 0
    return PlaybookAcceptanceCollector(runner, inventory, spec.storage.mount_path, spec.acceptance,
                                       int(spec.storage.checkpoint_tib * TIB),
                                       NetworkTools(provider="efa" if efa else "tcp"))


def storage_client_vars(spec: ClusterSpec, project: Project, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """storage_clients.yml's extravars: the Lustre client the BOM pins for the stack's OS (the
    clients run that OS's plain image), mounting the stack's FSx at `storage.mountPath`."""
    from gpufleet import catalog
    from gpufleet.bom import resolve_bom_path
    from gpufleet.configure.extravars import LustreMount, configure_extravars
    from gpufleet.rollout.storage_base import storage_client_extravars

    lustre = LustreMount(str(outputs.get("fsxDnsName") or ""), str(outputs.get("fsxMountName") or ""),
                         spec.storage.mount_path)
    site = configure_extravars(load_bom(resolve_bom_path(spec, project)), spec.image.os,
                               catalog.get(spec.cluster.instance_type), lustre=lustre)
    return storage_client_extravars(site)


def real_executor(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str,
                  outputs: Mapping[str, Any]) -> "AnsibleExecutor":
    """The stack's AnsibleExecutor over its `gpufleet:configure` connection, mounting the stack's FSx;
    on a Slurm pool it also writes the controller's configuration files and configures the controller
    with every batch."""
    from gpufleet.configure.executor import stack_executor
    from gpufleet.configure.extravars import LustreMount
    from gpufleet.monitoring.files import stack_monitoring_extravars
    from gpufleet.pool.slurm.files import accounting_extravars, write_slurm_config

    connection = connection_for(spec, outputs, project)
    lustre = (LustreMount(str(outputs["fsxDnsName"]), str(outputs["fsxMountName"]), spec.storage.mount_path)
              if outputs.get("fsxDnsName") and outputs.get("fsxMountName") else None)
    if spec.pool.type != "slurm":
        return stack_executor(spec, project, stack, connection, lustre=lustre)
    ip, instance_id, munge = (stack_output(outputs, name) for name in
                              ("slurmControllerIp", "slurmControllerInstanceId", "slurmMungeKeySecretArn"))
    # the controller play also runs Prometheus and Alertmanager, the node play the exporters
    slurm_vars = write_slurm_config(spec, plan, project, stack, ip) | stack_monitoring_extravars(spec, project, stack)
    slurm_vars |= head_node_extravars(spec, project, stack, slurm_vars["slurm_version"])  # slurmdbd, ops serve
    slurm_vars |= accounting_extravars(spec, plan)  # the partition QOS slurmdbd holds before slurmctld starts
    return stack_executor(spec, project, stack, connection, lustre=lustre, munge_secret_id=munge, slurm_vars=slurm_vars,
                          service_hosts=[controller_host(connection, ip, instance_id)])


def head_node_extravars(spec: ClusterSpec, project: Project, stack: str, slurm_version: str) -> dict[str, Any]:
    """The head node's services besides slurmctld and Prometheus (site.yml's controller play):
    slurmdbd when the stack has accounting (`slurm_accounting`), and `gpufleet ops serve` when
    Alertmanager posts to it on the head node, i.e. no `ops.alertWebhookUrl` elsewhere (`ops_webhook`).
    gpufleet is the running version: the project's own wheel of it in dist/ when there is one, else
    pip's requirement pinned to it."""
    from importlib.metadata import version

    from gpufleet.bom import resolve_bom_path
    from gpufleet.monitoring.files import OPS_SERVE
    from gpufleet.project import project_file

    out: dict[str, Any] = {}
    if spec.ops.slurm_accounting:
        out |= {"slurm_accounting_cluster": spec.cluster.name, "slurm_accounting_port": spec.ops.slurmdbd_port,
                "slurm_accounting_version": slurm_version}
    if spec.ops.alert_webhook_url is None:
        files = [f for f in (project_file(project.root), project.stack_file(stack), resolve_bom_path(spec, project),
                             project.default_compat) if f is not None and f.is_file()]
        # where each file sits in the project, not where a symlink points (a project may link images/)
        placed = {f: Path(os.path.normpath(f.absolute())) for f in files}
        outside = [f for f, at in placed.items() if not at.is_relative_to(project.root)]
        if outside:
            raise ConfigError(f"ops serve on the head node reads the stack's files from a copy of the project, "
                              f"and {outside[0]} is outside it", field="gpufleet:image.bom",
                              expected=f"a BOM inside the project {project.root}")
        gpufleet = version("gpufleet")
        wheel = project.root / "dist" / f"gpufleet-{gpufleet}-py3-none-any.whl"
        out |= {"ops_webhook_stack": stack, "ops_webhook_listen": OPS_SERVE,
                "ops_webhook_project_files": [{"src": str(f), "dest": str(placed[f].relative_to(project.root))}
                                              for f in files],
                "ops_webhook_wheel": str(wheel) if wheel.is_file() else "",
                "ops_webhook_requirement": f"gpufleet=={gpufleet}"}
    return out
