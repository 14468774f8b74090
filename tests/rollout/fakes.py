"""Small in-test fakes of the rollout's ports: a cloud whose faults the test names slot by slot.

Why not the simulator: these tests pin one orchestrator rule each (halt, remediate once, spares),
so each fault is placed by hand; the end-to-end tests use `gpufleet.sim`. Bundles come from
`gpufleet.gates.synth` (the real tools' formats), so the real gates decide; multi-node runs answer in
nccl-tests' format from a tiny fabric (a bad node slows every run it is in, a bad link only the
runs whose ring crosses it).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Mapping, Sequence

from gpufleet.gates import bundle as B, synth
from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool.protocol import LaunchResult
from gpufleet.ports import HostOutcome, HostStatus, Instance, ProvisionResult, StageResult

T0 = datetime(2026, 7, 14, 8, 0, tzinfo=timezone.utc)


class FakeClock:
    def __init__(self) -> None:
        self.t = T0

    def now(self) -> datetime:
        return self.t

    def set_elapsed(self, seconds: float) -> None:
        self.t = T0 + timedelta(seconds=seconds)


@dataclass
class FakeCloud:
    """Faults per slot for the slot's first instance (`faults`), or for every instance (`sticky`)."""

    faults: Mapping[str, frozenset[str]] = field(default_factory=dict)
    sticky: Mapping[str, frozenset[str]] = field(default_factory=dict)
    configure_fail: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    flaky: set[str] = field(default_factory=set)  # a missing file on the first preflight only
    missing: set[str] = field(default_factory=set)  # a missing file on every preflight of the first instance
    bad_links: set[tuple[str, str]] = field(default_factory=set)
    slow_nodes: set[str] = field(default_factory=set)
    shortfall_once: set[str] = field(default_factory=set)
    systemic: bool = False
    durations: Mapping[str, float] = field(default_factory=lambda: {"provision": 600, "configure": 900,
                                                                     "preflight": 1200, "nccl": 120})
    clock: FakeClock = field(default_factory=FakeClock)
    ledger: list[tuple[str, str, str]] = field(default_factory=list)  # (op, slot, instance id)
    instances: dict[str, Instance] = field(default_factory=dict)
    generation: dict[str, int] = field(default_factory=dict)
    preflights: dict[str, int] = field(default_factory=dict)
    remediations: list[tuple[str, str]] = field(default_factory=list)
    provisioner_overlaps: int = 0  # provisioner calls that started while another was running
    _busy: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _enter(self) -> None:
        with self._lock:
            self.provisioner_overlaps += self._busy > 0
            self._busy += 1

    def _leave(self) -> None:
        with self._lock:
            self._busy -= 1

    # --- Provisioner
    def provision(self, batch: int, slots: Sequence) -> ProvisionResult:
        self._enter()
        try:
            time.sleep(0.02)  # long enough for a second caller to show up, if there is one
            return self._provision(slots)
        finally:
            self._leave()

    def _provision(self, slots: Sequence) -> ProvisionResult:
        out, short = {}, {}
        for s in slots:
            if s.name in self.instances:
                out[s.name] = self.instances[s.name]
                continue
            if s.name in self.shortfall_once:
                self.shortfall_once.discard(s.name)
                short[s.name] = "InsufficientInstanceCapacity"
                continue
            out[s.name] = self._launch(s)
        return ProvisionResult(instances=out, shortfall=short, duration_s=self.durations["provision"])

    def _launch(self, s) -> Instance:
        g = self.generation.get(s.name, 0) + 1
        self.generation[s.name] = g
        inst = Instance(slot=s.name, instance_id=f"i-{s.index:05d}{g:02d}", batch=s.batch, block=s.block,
                        private_ip=f"10.0.{s.index // 250}.{s.index % 250 + 4}", generation=g - 1)
        self.instances[s.name] = inst
        self.ledger.append(("launch", s.name, inst.instance_id))
        return inst

    def replace(self, slot, action: str) -> Instance:
        self._enter()
        try:
            old = self.instances.get(slot.name)
            self.ledger.append((action, slot.name, old.instance_id if old else ""))
            return self._launch(slot)
        finally:
            self._leave()

    def inventory(self) -> Mapping[str, Instance]:
        self._enter()
        try:
            return dict(self.instances)
        finally:
            self._leave()

    # --- Executor
    def _gen(self, slot: str) -> int:
        return self.generation.get(slot, 1)

    def node_faults(self, slot: str) -> frozenset[str]:
        f = set(self.sticky.get(slot, ()))
        if self._gen(slot) == 1:
            f |= self.faults.get(slot, frozenset())
        if self.systemic:
            f.add("version_skew")
        return frozenset(f)

    def configure(self, instances: Sequence[Instance]) -> StageResult:
        hosts = {}
        for i in instances:
            if i.slot in self.unreachable and self._gen(i.slot) == 1:
                hosts[i.slot] = HostOutcome(i.slot, HostStatus.UNREACHABLE, message="ssh: connect timed out")
            elif i.slot in self.configure_fail and self._gen(i.slot) == 1:
                hosts[i.slot] = HostOutcome(i.slot, HostStatus.FAILED, task="efa : install", message="rc 1")
            else:
                hosts[i.slot] = HostOutcome(i.slot, HostStatus.OK)
        return StageResult(hosts=hosts, duration_s=self.durations["configure"])

    def preflight(self, instances: Sequence[Instance], dest: Path) -> StageResult:
        hosts = {}
        for i in instances:
            self.preflights[i.slot] = self.preflights.get(i.slot, 0) + 1
            spec = synth.NodeSpec(slot=i.slot, instance_id=i.instance_id, faults=self.node_faults(i.slot),
                                  batch=i.batch, stack="t")
            files = synth.node_files(spec)
            if (i.slot in self.flaky and self.preflights[i.slot] == 1) or (i.slot in self.missing
                                                                            and self._gen(i.slot) == 1):
                files.pop(B.FI_INFO)
            B.write_bundle(dest / i.slot, files, synth.manifest(spec, files))
            hosts[i.slot] = HostOutcome(i.slot, HostStatus.OK)
        return StageResult(hosts=hosts, duration_s=self.durations["preflight"])

    def remediate(self, instance: Instance, action: str) -> HostOutcome:
        self.remediations.append((instance.slot, action))
        return HostOutcome(instance.slot, HostStatus.OK, duration_s=300)

    # --- Launcher
    def run(self, specs: Sequence[LaunchSpec], timeout_s: float) -> list[LaunchResult]:
        out = []
        for s in specs:
            nodes = list(s.nodes)
            edges = {tuple(sorted((nodes[i], nodes[(i + 1) % len(nodes)]))) for i in range(len(nodes))}
            slow = any(n in self.slow_nodes and self._gen(n) == 1 for n in nodes) or (edges & self.bad_links)
            busbw = 120.0 if slow else 365.0
            text = synth.nccl_intra(synth.NodeSpec(slot=nodes[0], intra_busbw=busbw))
            out.append(LaunchResult(name=s.name, nodes=s.nodes, exit_code=0, output=text, started=self.clock.now(),
                                    ended=self.clock.now() + timedelta(seconds=self.durations["nccl"]),
                                    command=s.command_line))
        return out

