"""The rollout's Executor over ansible-runner: site.yml, preflight.yml and remediate.yml.

Thin on purpose: instances become inventory nodes (hosts named by slot), each call runs one
playbook through `AnsibleConfigurator` (which reads the event stream into per-host verdicts),
and verdicts become the ports' `HostOutcome` with each host's measured time in the stage.
Preflight bundles are fetched into a fresh folder of the run and only then moved to
`dest/<slot>/`: a host cut during the fetch never leaves half a bundle there, and a retest
never mixes its files with an older bundle's.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, get_args

from gpufleet import catalog
from gpufleet.bom import Bom, load_bom, resolve_bom_path
from gpufleet.configure.extravars import LustreMount, configure_extravars, image_ships_gpu_stack
from gpufleet.configure.inventory import Connection, Node, SshConnection, SsmConnection
from gpufleet.configure.runner import AnsibleConfigurator, HostProgress, Verdict
from gpufleet.errors import ConfigError, PoolError
from gpufleet.gates.image import image_runtime
from gpufleet.project import Project
from gpufleet.ports import HostOutcome, HostStatus, Instance, RemediateAction, StageResult
from gpufleet.spec import ClusterSpec

_STATUS = {Verdict.OK: HostStatus.OK, Verdict.FAILED: HostStatus.FAILED, Verdict.UNREACHABLE: HostStatus.UNREACHABLE}
BUNDLE_MARKER = "manifest.json"  # the preflight writes it last: a bundle without it is incomplete


class AnsibleExecutor:
    """`gpufleet.ports.Executor` over SSH or SSM (whatever `connection` is)."""

    def __init__(self, runner: AnsibleConfigurator, connection: Connection, site_vars: Mapping[str, Any], *,
                 groups: Sequence[str] = (), context: Mapping[str, Any] | None = None,
                 preflight_vars: Mapping[str, Any] | None = None, service_hosts: Sequence[Node] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runner = runner
        self.connection = connection
        self.site_vars = dict(site_vars)  # the BOM's versions and the stack's choices (configure_extravars)
        self.groups = tuple(groups)  # the pool's group: `slurm` plays the munge role
        self.context = dict(context or {})  # gpufleet_stack, gpufleet_instance_type: for every playbook
        if isinstance(connection, SshConnection) and connection.user == "root":
            self.context.setdefault("gpufleet_become", False)  # already root: no sudo needed (or installed)
        self.preflight_vars = dict(preflight_vars or {})
        # hosts every configure run includes besides the batch (the Slurm controller, `gpu=False`):
        # site.yml configures them before the nodes, idempotently on every later batch
        self.service_hosts = tuple(service_hosts)
        self.clock = clock

    def configure(self, instances: Sequence[Instance]) -> StageResult:
        stage = self._stage("configure", instances, "site.yml", self.site_vars, self.service_hosts)
        for host in self.service_hosts:
            outcome = stage.hosts.pop(host.slot, None)
            if outcome is not None and outcome.status is not HostStatus.OK:
                # not the batch's fault: replacing its nodes would not help, so the rollout stops here
                at = f" at task {outcome.task!r}" if outcome.task else ""
                raise PoolError(f"configure {outcome.status.value}{at}: {outcome.message}", node=host.slot)
        return stage

    def preflight(self, instances: Sequence[Instance], dest: Path) -> StageResult:
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".preflight-", dir=dest))  # same file system: renames are atomic
        try:
            stage = self._stage("preflight", instances, "preflight.yml",
                                {**self.preflight_vars, "gpufleet_bundle_dir": str(staging)})
            hosts = {slot: self._publish(outcome, staging / slot, dest / slot) for slot, outcome in stage.hosts.items()}
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return StageResult(hosts=hosts, duration_s=stage.duration_s)

    def remediate(self, instance: Instance, action: RemediateAction) -> HostOutcome:
        if action not in get_args(RemediateAction):
            raise ConfigError(f"unknown remediation {action!r}", expected=" or ".join(get_args(RemediateAction)))
        stage = self._stage(f"remediate-{action}", [instance], "remediate.yml", {"gpufleet_remediate_action": action})
        return stage.hosts[instance.slot]

    def run_playbook(self, stage: str, instances: Sequence[Instance], playbook: str,
                     extravars: Mapping[str, Any]) -> StageResult:
        """Another project playbook over these instances, e.g. the acceptance base checks
        (`gpufleet.rollout.acceptance_collect`), with the same connection and context."""
        return self._stage(stage, instances, playbook, extravars)

    # --- internals ---------------------------------------------------------------------------

    def _node(self, instance: Instance) -> Node | str:
        """The inventory node, or why the instance cannot be reached with this connection."""
        if isinstance(self.connection, SsmConnection):
            if not instance.instance_id:
                return "no instance id for the SSM connection"
            address = instance.instance_id
        else:
            if not instance.private_ip:
                return "no private IP address to connect to"
            address = instance.private_ip
        return Node(slot=instance.slot, address=address, instance_id=instance.instance_id, groups=self.groups,
                    hostvars={"gpufleet_batch": instance.batch, "gpufleet_block": instance.block})

    def _stage(self, stage: str, instances: Sequence[Instance], playbook: str,
               extravars: Mapping[str, Any], service_hosts: Sequence[Node] = ()) -> StageResult:
        started = self.clock()
        hosts: dict[str, HostOutcome] = {}
        nodes: list[Node] = []
        for instance in instances:
            node = self._node(instance)
            if isinstance(node, str):
                hosts[instance.slot] = HostOutcome(instance.slot, HostStatus.UNREACHABLE, None, node)
            else:
                nodes.append(node)
        if nodes:
            nodes.extend(service_hosts)
            last_event: dict[str, float] = {}

            def on_progress(p: HostProgress) -> None:
                last_event[p.host] = self.clock()

            result = self.runner.run(nodes, self.connection, {**self.context, **extravars}, playbook=playbook,
                                     run_id=f"{stage}-{uuid.uuid4().hex[:10]}", on_progress=on_progress)
            ended = self.clock()
            for slot, r in result.hosts.items():
                hosts[slot] = HostOutcome(slot, _STATUS[r.verdict], r.task, r.message,
                                          duration_s=round(last_event.get(slot, ended) - started, 3))
        return StageResult(hosts=hosts, duration_s=round(self.clock() - started, 3))

    @staticmethod
    def _publish(outcome: HostOutcome, fetched: Path, target: Path) -> HostOutcome:
        """Replace `target` with the fetched bundle of a host that finished; drop any older one."""
        if target.exists():
            shutil.rmtree(target)
        if outcome.status is not HostStatus.OK:
            return outcome
        if not (fetched / BUNDLE_MARKER).is_file():
            return HostOutcome(outcome.slot, HostStatus.FAILED, "Fetch the bundle to the controller",
                               f"the play finished but no {BUNDLE_MARKER} came back", outcome.duration_s)
        fetched.rename(target)
        return outcome


def stack_executor(spec: ClusterSpec, project: Project, stack: str, connection: Connection, *,
                   bom: Bom | None = None, lustre: LustreMount | None = None, munge_secret_id: str | None = None,
                   slurm_vars: Mapping[str, Any] | None = None, service_hosts: Sequence[Node] = (),
                   forks: int = 50) -> AnsibleExecutor:
    """The executor a stack's rollout uses: its BOM, OS, instance type, pool and gate settings;
    run artifacts under the project's `.gpufleet/<stack>/runner/`. `slurm_vars` (the generated
    configuration files, `gpufleet.pool.slurm.files`) override the BOM's Slurm pin; `service_hosts`
    join every configure run (the Slurm controller)."""
    instance = catalog.CATALOG[spec.cluster.instance_type]
    bom = bom or load_bom(resolve_bom_path(spec, project))
    if lustre and spec.storage.efa_enabled:  # the GPU nodes reach an EFA-enabled file system over EFA
        lustre = dataclasses.replace(lustre, efa=True)
    ships = image_ships_gpu_stack(spec.image.os, spec.image.ami_id, spec.image.ami_ssm_parameter)
    site_vars = configure_extravars(bom, spec.image.os, instance, lustre=lustre, munge_secret_id=munge_secret_id,
                                    region=spec.cluster.region, ships_gpu_stack=ships) | dict(slurm_vars or {})
    runner = AnsibleConfigurator(project.state_dir(stack), playbook_dir=project.playbooks_dir, forks=forks)
    groups = (spec.pool.type,) if spec.pool.type in ("slurm", "kubernetes") else ()
    context = {"gpufleet_stack": stack, "gpufleet_instance_type": spec.cluster.instance_type}
    preflight_vars = {"gpufleet_dcgm_level": spec.gates.dcgm_level, "gpufleet_gpus_per_node": instance.gpus}
    if lustre:
        preflight_vars["gpufleet_lustre_mount"] = lustre.mount_path
    if spec.acceptance.workload_image:  # pulled by site.yml, listed and run by preflight.yml (gpufleet.gates.image)
        image_vars = {"image_prepull_image": spec.acceptance.workload_image,
                      "image_prepull_runtime": image_runtime(spec.pool.type)}
        site_vars |= image_vars
        preflight_vars |= image_vars
    return AnsibleExecutor(runner, connection, site_vars, groups=groups, context=context,
                           preflight_vars=preflight_vars, service_hosts=service_hosts)
