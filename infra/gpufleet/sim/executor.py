"""The simulated Executor: configure, preflight bundles, remediation, on the simulated fleet.

It never decides: a configure failure or an unreachable host is what ansible-runner would report;
preflight writes each reachable node's raw outputs (infra/gpufleet/gates/BUNDLE.md) and the real gates
judge them. Remediation changes the node (a reset applies a pending row remap; a reboot also
starts a new kernel log and a fresh GSP), so the retest shows what is left; bad hardware stays.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from gpufleet.gates import synth
from gpufleet.ports import HostOutcome, HostStatus, Instance, RemediateAction, StageResult
from gpufleet.sim.faults import CONFIGURE_FAILED_TASK
from gpufleet.sim.world import SimInstance

if TYPE_CHECKING:
    from gpufleet.bom import Bom
    from gpufleet.sim.fleet import NodeProfile, SimFleet


FAILED_AT = 0.5  # the driver install that fails runs about half way through site.yml


def unreachable_message(ip: str) -> str:
    return f"Failed to connect to the host via ssh: ssh: connect to host {ip} port 22: Connection timed out"


class SimExecutor:
    def __init__(self, cloud: "SimFleet", bom: "Bom | None" = None) -> None:
        self.cloud = cloud
        self.bom = bom  # what configure installs: the stack's BOM unless an upgrade or rollback names another

    def with_bom(self, bom: "Bom") -> "SimExecutor":
        return SimExecutor(self.cloud, bom)

    def _profile(self, instance: Instance) -> "NodeProfile | None":
        inst: SimInstance | None = self.cloud.running(instance.instance_id)
        return None if inst is None else self.cloud.profile(inst)

    def _unanswered(self, instance: Instance, p: "NodeProfile | None", took: float) -> HostOutcome | None:
        """UNREACHABLE for an instance that is not running (stopped, replaced, never launched) or a
        host that never answers (after the transport's timeout, `took`); None for one that answers."""
        if p is None:
            return HostOutcome(slot=instance.slot, status=HostStatus.UNREACHABLE,
                               message=f"{instance.instance_id} is not running")
        if not p.reachable:
            return HostOutcome(slot=instance.slot, status=HostStatus.UNREACHABLE,
                               message=unreachable_message(p.who.private_ip), duration_s=took)
        return None

    def configure(self, instances: Sequence[Instance]) -> StageResult:
        d = self.cloud.config.durations
        stage = d.configure + d.image_pull
        hosts = {}
        for i in instances:
            p = self._profile(i)
            if (down := self._unanswered(i, p, stage)) is not None:
                hosts[i.slot] = down
            elif p.fault == "configure-failed":
                hosts[i.slot] = HostOutcome(
                    slot=i.slot, status=HostStatus.FAILED, task=CONFIGURE_FAILED_TASK,
                    duration_s=d.configure * FAILED_AT,
                    message="non-zero return code: E: Sub-process /usr/bin/dpkg returned an error code (1); "
                            "nvidia-dkms: modprobe: ERROR: could not insert 'nvidia': No such device")
            else:
                hosts[i.slot] = HostOutcome(slot=i.slot, status=HostStatus.OK, duration_s=stage)
        bom = self.bom or self.cloud.bom
        self.cloud.installed.record([i.instance_id for i in instances if hosts[i.slot].status is HostStatus.OK],
                                    bom.digest(), synth.bom_versions(bom, self.cloud.spec.image.os))
        return StageResult(hosts=hosts, duration_s=stage if instances else 0.0)

    def preflight(self, instances: Sequence[Instance], dest: Path) -> StageResult:
        c = self.cloud
        d = c.config.durations
        stage = d.dcgm_level[c.spec.gates.dcgm_level] + d.preflight_other
        started = c.clock.now()
        dest = Path(dest)
        hosts = {}
        for i in instances:
            p = self._profile(i)
            if (down := self._unanswered(i, p, stage)) is not None:
                hosts[i.slot] = down
            else:
                c.writer.write(dest / i.slot, c.look(p), p.who, started)
                hosts[i.slot] = HostOutcome(slot=i.slot, status=HostStatus.OK, duration_s=stage)
        return StageResult(hosts=hosts, duration_s=stage if instances else 0.0)

    def remediate(self, instance: Instance, action: RemediateAction) -> HostOutcome:
        d = self.cloud.config.durations
        if action not in ("reset-gpu", "reboot"):
            raise ValueError(f"unknown remediation {action!r}; expected reset-gpu or reboot")
        p = self._profile(instance)
        took = d.reset if action == "reset-gpu" else d.reboot
        if (down := self._unanswered(instance, p, took)) is not None:
            return down
        self.cloud.remedies.add(instance.instance_id, action)
        return HostOutcome(slot=instance.slot, status=HostStatus.OK, duration_s=took)
