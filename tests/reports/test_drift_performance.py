"""The performance layer: the latest baselines per node, block and scale vs their history.

A fleet of 3 blocks x 4 nodes is "rolled out" five times (admission records and the communication
baseline rewritten each time, with a little run-to-run noise), then a sixth time with block 1's
pair bandwidth down 15%: that block, and only it, regresses.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gpufleet.gates.admission import AdmissionRecord, BusbwFigures
from gpufleet.gates.verdict import Action, Verdict
from gpufleet.reports.document import LineHistory
from gpufleet.reports.drift import DriftReport, LayerStatus, drift_document
from gpufleet.reports.drift_performance import PerfSnapshot, regressions, snapshot
from gpufleet.reports.drift_run import DriftOptions, performance_layer
from gpufleet.reports.sources import StoredBaselines
from gpufleet.reports.write import render_all

T0 = datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)
BLOCKS, PER_BLOCK = 3, 4


def _slot(block: int, i: int) -> str:
    return f"gpu-b{block:04d}-n{block * PER_BLOCK + i:05d}"


def _run(state_dir: Path, day: int, rng: random.Random, slow_block: int | None = None, slow: float = 0.85,
         quarantined: str | None = None) -> None:
    """One rollout's stored baselines: a record per node (intra-node and pair busbw), communication.json."""
    records = state_dir / "records"
    records.mkdir(parents=True, exist_ok=True)
    decided = T0 + timedelta(days=day)
    for block in range(BLOCKS):
        for i in range(PER_BLOCK):
            slot = _slot(block, i)
            partner = _slot(block, (i + 1) % PER_BLOCK)
            pair = 94.0 * rng.uniform(0.985, 1.015) * (slow if block == slow_block else 1.0)
            rec = AdmissionRecord(
                slot=slot, instance_type="p5.48xlarge", stack="gpu", batch=1, block=block, bom_digest="sha256:x",
                verdict=Verdict.QUARANTINE if slot == quarantined else Verdict.PASS,
                action=Action.QUARANTINE if slot == quarantined else Action.ADMIT, checks=(),
                busbw=BusbwFigures(intra_node_gbs=round(480.0 * rng.uniform(0.99, 1.01), 2), intra_node_floor_gbs=432,
                                   multi_node_gbs={partner: round(pair, 2), "ring:batch-1": 90.0}),
                decided_at=decided)
            (records / f"{slot}.json").write_text(rec.model_dump_json(indent=2))
    comm = {"schema_version": 1, "stack": "gpu", "instance_type": "p5.48xlarge", "updated_at": decided.isoformat(),
            "scales": {"2": {"median_gbs": round(94.0 * rng.uniform(0.99, 1.01), 2), "runs": 6, "passed": 6,
                             "floor_gbs": 80.0, "min_gbs": 90.0, "max_gbs": 96.0},
                       "4": {"median_gbs": round(92.0 * rng.uniform(0.99, 1.01), 2), "runs": 3, "passed": 3,
                             "floor_gbs": 78.0, "min_gbs": 90.0, "max_gbs": 93.0}},
            "batches": {}}
    (state_dir / "baselines").mkdir(parents=True, exist_ok=True)
    (state_dir / "baselines" / "communication.json").write_text(json.dumps(comm))


def test_one_regressing_block_over_a_history_of_runs_is_found_and_only_it(tmp_path):
    rng = random.Random(11)
    store = StoredBaselines(tmp_path)
    options = DriftOptions(regression_fraction=0.05)
    for day in range(5):
        _run(tmp_path, day, rng)
        result = performance_layer(_sources(store), options)
        assert result.status is LayerStatus.CLEAN, result.findings  # noise stays under the threshold
        assert ("first snapshot" in result.notes[0]) == (day == 0)
        again = performance_layer(_sources(store), options)  # a second drift run the same day adds nothing
        assert again.status is LayerStatus.CLEAN
    assert len(store.history()) == 5

    _run(tmp_path, 5, rng, slow_block=1)
    result = performance_layer(_sources(store), options)
    assert result.status is LayerStatus.DRIFT
    [f] = result.findings
    assert (f.check, f.subject, f.field) == ("baseline-regression", "block 1", "median pair busbw")
    assert "below the median" in f.message and "of its last 5 run(s)" in f.message
    assert len(store.history()) == 6
    # the evidence: block 1's series against the median of all blocks over the compared runs
    h = result.history
    assert h is not None and len(h.runs) == 6 and list(h.regressed) == ["1"]
    assert h.regressed["1"][-1] < 0.9 * h.median_of_blocks[-1] and all(v > 90 for v in h.regressed["1"][:-1])
    doc = drift_document(DriftReport(stack="gpu", generated_at=T0, layers=[result]))
    [chart] = [b for s in doc.sections for b in s.blocks if isinstance(b, LineHistory)]
    assert [x.name for x in chart.series] == ["median of all blocks", "block 1"] and chart.runs == h.runs
    html = render_all(doc, result, ["html"])["html"]
    assert "<svg" in html and "block 1" in html

    # the regressed run is history now: a block back to normal is clean again (the median resists one bad run)
    _run(tmp_path, 6, rng)
    assert performance_layer(_sources(store), options).status is LayerStatus.CLEAN


def test_a_tighter_threshold_and_the_window(tmp_path):
    history = [PerfSnapshot(taken_at=T0 + timedelta(days=d), blocks={"0": v}) for d, v in
               enumerate([100.0, 100.0, 100.0, 60.0, 60.0, 60.0])]
    current = PerfSnapshot(taken_at=T0 + timedelta(days=9), blocks={"0": 62.0})
    assert regressions(current, history, 0.05, window=3) == []  # against the last 3 runs (60): no regression
    [f] = regressions(current, history, 0.05, window=6)  # the median of all six is 80
    assert f.found == "62.00 GB/s" and f.expected == ">= 76.00 GB/s"
    assert regressions(current, [], 0.05) == []  # no history: nothing to compare
    # a snapshot compares only with older ones, even when it was recorded already
    assert regressions(history[0], history, 0.05) == []


def test_no_stored_baselines_is_clean_with_a_note_and_quarantined_nodes_are_not_baselines(tmp_path):
    result = performance_layer(_sources(StoredBaselines(tmp_path)), DriftOptions())
    assert result.status is LayerStatus.CLEAN and "No baselines stored yet" in result.notes[0]
    rng = random.Random(2)
    _run(tmp_path, 0, rng, quarantined=_slot(2, 3))
    snap = StoredBaselines(tmp_path).current()
    assert snap is not None and _slot(2, 3) not in snap.nodes and len(snap.nodes) == 11
    assert set(snap.blocks) == {"0", "1", "2"} and set(snap.scales) == {"2", "4"}
    assert snapshot([], None) is None


def test_a_torn_history_line_is_dropped_and_never_ends_up_mid_file(tmp_path):
    rng = random.Random(5)
    store = StoredBaselines(tmp_path)
    _run(tmp_path, 0, rng)
    performance_layer(_sources(store), DriftOptions())
    with open(store.history_path, "a") as f:
        f.write('{"schema_version": 1, "taken_at": "2026-11-0')  # a drift run killed mid-write
    assert len(store.history()) == 1
    _run(tmp_path, 1, rng)
    performance_layer(_sources(store), DriftOptions())
    assert [h.taken_at.day for h in store.history()] == [1, 2]
    assert store.history_path.read_text().count("\n") == 2


class _sources:
    def __init__(self, baselines: StoredBaselines) -> None:
        self.baselines = baselines
