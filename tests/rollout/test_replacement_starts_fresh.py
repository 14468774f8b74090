"""A replacement instance starts with no previous outcome: its own REMEDIATE earns its own retest.

The old instance's REMEDIATE (and its failed retest) belong to that instance; if the replacement
inherited them, its first REMEDIATE would read as a second one and quarantine a node that a
retest would have admitted, and spend another spare.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from gpufleet.gates import bundle as B, synth
from gpufleet.ports import HostOutcome, HostStatus, Instance, StageResult
from gpufleet.rollout.state import NodeStage

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SLOT = "tst-b{0:04d}-n{0:05d}".format
STUCK = SLOT(5)  # batch 2


@dataclass
class FirstPreflightOfEveryInstanceFails(FakeCloud):
    """`STUCK`'s first instance misses fi_info on every preflight; each later instance on its first only."""

    per_instance: dict[str, int] = field(default_factory=dict)

    def preflight(self, instances: Sequence[Instance], dest: Path) -> StageResult:
        hosts = {}
        for i in instances:
            self.preflights[i.slot] = self.preflights.get(i.slot, 0) + 1
            self.per_instance[i.instance_id] = self.per_instance.get(i.instance_id, 0) + 1
            spec = synth.NodeSpec(slot=i.slot, instance_id=i.instance_id, faults=self.node_faults(i.slot),
                                  batch=i.batch, stack="t")
            files = synth.node_files(spec)
            if i.slot == STUCK and (self._gen(i.slot) == 1 or self.per_instance[i.instance_id] == 1):
                files.pop(B.FI_INFO)
            B.write_bundle(dest / i.slot, files, synth.manifest(spec, files))
            hosts[i.slot] = HostOutcome(i.slot, HostStatus.OK)
        return StageResult(hosts=hosts, duration_s=self.durations["preflight"])


def test_a_replacement_gets_its_own_retest_and_is_admitted(tmp_path):
    cloud = FirstPreflightOfEveryInstanceFails()
    out = orchestrator(tmp_path, cloud, small_spec(maxFailureRate=0.5)).run()
    node = out.state.nodes[STUCK]
    assert node.replacements == 1, node.history
    assert node.stage is NodeStage.ADMITTED, node.history
    # one remediation per instance: the first instance's, then the replacement's own
    assert [s for s, _ in cloud.remediations].count(STUCK) == 2
    retests = [iid for what, iid, _ in node.history if what == "retest"]
    assert len(retests) == 2 and retests[1] == node.instance_id != retests[0]
    quarantined = [iid for what, iid, _ in node.history if what == "quarantined"]
    assert quarantined == [retests[0]]  # only the first instance was quarantined
