"""`canaryMaxFailureRate` is the canary batch's bar only; every later batch is judged by `maxFailureRate`."""

from __future__ import annotations

from gpufleet.rollout.state import BatchStage

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SLOT = "tst-b{0:04d}-n{0:05d}".format  # batch 1 (the canary) is slots 0-2, batch 2 slots 3-6


def test_a_strict_canary_bar_does_not_halt_a_later_batch_within_max_failure_rate(tmp_path):
    spec = small_spec(maxFailureRate=0.5, canaryMaxFailureRate=0.0)
    cloud = FakeCloud(faults={SLOT(4): frozenset({"nvlink_down"})})  # batch 2: 1 of 4 fails, 25% <= 50%
    out = orchestrator(tmp_path, cloud, spec).run()
    assert not out.halted and out.finished, out.halt_reason
    assert out.state.batches[2].stage is BatchStage.PASSED


def test_a_lenient_canary_bar_does_not_spare_a_later_batch(tmp_path):
    spec = small_spec(maxFailureRate=0.0, canaryMaxFailureRate=0.5)
    faults = {SLOT(1): frozenset({"nvlink_down"}), SLOT(4): frozenset({"nvlink_down"})}
    out = orchestrator(tmp_path, FakeCloud(faults=faults), spec).run()
    # the canary's 1 of 3 (33%) is within its own bar; batch 2's 1 of 4 (25%) is above maxFailureRate
    assert out.state.batches[1].stage is BatchStage.PASSED
    assert out.halted and out.halt_reason.startswith("batch 2 failed 1 of 4 nodes (25% > 0%)"), out.halt_reason
