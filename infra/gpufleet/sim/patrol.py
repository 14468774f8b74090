"""The simulator's answer to a patrol: each running node's light bundle (the patrol's files of the
preflight bundle, in the real tools' formats), with the kernel log as `journalctl --since` would
show a fault that developed after admission: its lines stamped when it appeared.

Why here: the patrol's collector port (`gpufleet.daytwo.collect.PatrolCollector`) has a real adapter
(preflight.yml with the light command list) and this one; the patrol cannot tell them apart.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from gpufleet.gates import bundle as B
from gpufleet.ports import HostOutcome, HostStatus, Instance, StageResult
from gpufleet.sim.executor import unreachable_message

if TYPE_CHECKING:
    from gpufleet.sim.cloud import SimulatedCloud

PATROL_SECONDS = 90.0  # the light checks and a 1-2 GiB all-reduce: about a minute and a half per node


def restamp(kernel_log: str, at: datetime) -> str:
    """Xid/SXid lines stamped `at` (short-iso, as journalctl prints them)."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S+0000")
    out = []
    for line in kernel_log.splitlines(keepends=True):
        if "NVRM: Xid" in line or "SXid" in line:
            line = stamp + line[line.index(" "):]
        out.append(line)
    return "".join(out)


class SimPatrolCollector:
    def __init__(self, cloud: "SimulatedCloud", files: Sequence[str]) -> None:
        self.cloud = cloud
        self.files = tuple(files)

    def collect(self, instances: Sequence[Instance], since: Mapping[str, datetime | None], dest: Path) -> StageResult:
        c = self.cloud
        started = c.clock.now()
        hosts = {}
        for i in instances:
            inst = c.running(i.instance_id)
            if inst is None:
                hosts[i.slot] = HostOutcome(i.slot, HostStatus.UNREACHABLE, message=f"{i.instance_id} is not running")
                continue
            p = c.profile(inst)
            if not p.reachable:
                hosts[i.slot] = HostOutcome(i.slot, HostStatus.UNREACHABLE, message=unreachable_message(i.private_ip or ""),
                                            duration_s=PATROL_SECONDS)
                continue
            files = c.writer.files(c.look(p), p.who, started)
            late = c.late.of(inst)
            if late is not None:
                files[B.KERNEL_LOG] = restamp(files[B.KERNEL_LOG].decode(), late.since).encode()
            folder = dest / i.slot
            folder.mkdir(parents=True, exist_ok=True)
            for name in (*self.files, B.MANIFEST):
                if name not in files:  # a file this SKU's simulated tools do not produce
                    continue
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(files[name])
            hosts[i.slot] = HostOutcome(i.slot, HostStatus.OK, duration_s=PATROL_SECONDS)
        return StageResult(hosts=hosts, duration_s=PATROL_SECONDS if instances else 0.0)
