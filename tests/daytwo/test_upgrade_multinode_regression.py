"""An upgrade that regresses only the multi-node busbw is flagged, even when every intra-node figure holds.

A new NCCL or aws-ofi-nccl can leave one node's NVLink all-reduce untouched and still slow every
cross-node ring (a transport or tuner change): the upgrade's group gate compares both medians.
"""

from __future__ import annotations

from gpufleet.daytwo.upgrade_run import baselines, regression
from gpufleet.gates.admission import AdmissionRecord, BusbwFigures
from gpufleet.gates.verdict import Action, Verdict

FRACTION = 0.05


def _record(slot: str, intra: float, multi: float) -> AdmissionRecord:
    return AdmissionRecord(slot=slot, instance_type="p5.48xlarge", bom_digest="sha256:old", verdict=Verdict.PASS,
                           action=Action.ADMIT, checks=(),
                           busbw=BusbwFigures(intra_node_gbs=intra, multi_node_gbs={"ring": multi}))


def test_a_multi_node_only_regression_is_flagged() -> None:
    before = baselines([_record(f"n{i}", 365.0, 300.0) for i in range(4)])
    after = baselines([_record(f"n{i}", 365.0, 270.0) for i in range(4)])  # 10% under, intra unchanged
    assert before["multi_node_gbs"] == 300.0 and after["intra_node_gbs"] == before["intra_node_gbs"]
    why = regression(before, after, FRACTION)
    assert why.startswith("multi-node busbw median 270 GB/s is 10.0% under the group's previous 300"), why
    assert "intra-node" not in why


def test_the_multi_node_figure_after_the_upgrade_comes_from_the_group_runs() -> None:
    records = [_record(f"n{i}", 365.0, 300.0) for i in range(4)]
    runs = [{"busbw_gbs": 250.0, "measured": True}, {"busbw_gbs": 252.0, "measured": True},
            {"busbw_gbs": 400.0, "measured": False}]  # a run that never measured is not a figure
    after = baselines(records, runs)
    assert after["multi_node_gbs"] == 251.0
    assert "multi-node busbw median 251 GB/s" in regression(baselines(records), after, FRACTION)


def test_within_the_fraction_nothing_is_flagged() -> None:
    before = baselines([_record("n0", 365.0, 300.0)])
    assert regression(before, baselines([_record("n0", 365.0, 290.0)]), FRACTION) == ""  # 3.3% under
