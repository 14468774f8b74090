"""The pure decision: which alerts quarantine, which page, which are ignored, and the budget."""

from __future__ import annotations

from gpufleet.ops.webhook import Notification, budget, decide, reason_code
from gpufleet.pool.protocol import NodeState, PoolNode, PoolState
from tests.ops.alertmanager import alert, notification


def _pool(n: int = 20, out: int = 0, partition: str = "train") -> PoolState:
    nodes = {f"n{i:02d}": PoolNode(f"n{i:02d}", NodeState.QUARANTINED if i < out else NodeState.ADMITTED,
                                   partition=partition) for i in range(n)}
    return PoolState(nodes)


def _note(*alerts: dict) -> Notification:
    return Notification.model_validate(notification(*alerts))


def test_forty_percent_alerting_quarantines_only_the_share() -> None:
    state = _pool(20)
    d = decide(_note(*(alert(f"n{i:02d}") for i in range(8))), state, 0.1)
    assert [q.slot for q in d.quarantine] == ["n00", "n01"]
    assert len(d.page) == 6 and all("alert budget" in p.why for p in d.page)


def test_the_budget_counts_what_is_already_out_of_work() -> None:
    assert budget(_pool(20, out=1), 0.1) == {"train": 1}
    assert budget(_pool(20, out=3), 0.1) == {"train": 0}
    d = decide(_note(alert("n05")), _pool(20, out=2), 0.1)
    assert not d.quarantine and d.page[0].slot == "n05"


def test_resolved_unknown_paging_and_repeated_alerts_take_no_action() -> None:
    state = _pool(20, out=1)
    d = decide(_note(alert("n03", status="resolved"), alert("nope"), alert("n04", action="page"),
                     alert(None), alert("n00"), alert("n05"), alert("n05", name="GpuEccUncorrectable")), state, 0.5)
    assert [q.slot for q in d.quarantine] == ["n05"]
    why = {(i.slot, i.why.split(";")[0].split(" (")[0]) for i in d.ignored}
    assert why == {("n03", "resolved"), ("nope", "not a node of this pool"), ("n00", "already out of work"),
                   ("n05", "already quarantined by this notification")}
    assert {(p.slot, p.alertname) for p in d.page} == {("n04", "GpuXidFatal"), (None, "GpuXidFatal")}


def test_the_reason_is_the_alert_and_the_evidence_its_labels() -> None:
    d = decide(_note(alert("n01", name="GpuRowRemapFailure")), _pool(20), 0.1)
    q = d.quarantine[0]
    assert q.reason_code == "GpuRowRemapFailure" and q.reason.startswith("alert GpuRowRemapFailure: ")
    assert q.evidence["labels"]["node"] == "n01" and q.evidence["fingerprint"]
    assert reason_code("bad name/with spaces!") == "bad-name-with-spaces"
    assert reason_code("x" * 100) == "x" * 63
