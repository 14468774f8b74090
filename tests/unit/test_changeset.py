"""The change set's decision and its table: asked at a terminal, refused off one, never on a
simulated stack, nothing on a dry run; the table compresses slots and sums the hourly cost."""

from __future__ import annotations

import pytest

from gpufleet.changeset import Change, ChangeSet, ChangeSetBuilder, Decision, compress, decide
from gpufleet.errors import GpufleetError, UsageError


def _buy(n: int = 3, price: float | None = 55.04, simulated: bool = False) -> ChangeSet:
    b = ChangeSetBuilder("rollout", "prod", simulated=simulated, price_note="on-demand, us-east-1")
    for i in range(n):
        b.add("launch", "instance", f"prod-b0001-n{i:05d}", usd_per_hour=price)
    return b.build()


def _never(question: str) -> bool:
    raise AssertionError(f"asked {question!r} where nobody may be asked")


def test_off_a_terminal_without_yes_is_refused_naming_the_flag():
    with pytest.raises(UsageError) as err:
        decide(_buy(), yes=False, dry_run=False, interactive=False, ask=_never)
    assert err.value.exit_code == 2 and "--yes" in str(err.value) and "3 instance to launch" in str(err.value)


def test_yes_dry_run_simulated_and_empty_never_ask():
    assert decide(_buy(), yes=True, dry_run=False, interactive=False, ask=_never) is Decision.PROCEED
    assert decide(_buy(), yes=False, dry_run=True, interactive=False, ask=_never) is Decision.DRY_RUN
    assert decide(_buy(), yes=True, dry_run=True, interactive=True, ask=_never) is Decision.DRY_RUN
    assert decide(_buy(simulated=True), yes=False, dry_run=False, interactive=False, ask=_never) is Decision.PROCEED
    assert decide(_buy(0), yes=False, dry_run=False, interactive=False, ask=_never) is Decision.PROCEED


def test_at_a_terminal_the_answer_decides():
    asked: list[str] = []
    assert decide(_buy(), yes=False, dry_run=False, interactive=True,
                  ask=lambda q: asked.append(q) or True) is Decision.PROCEED
    assert asked and "prod" in asked[0]
    with pytest.raises(GpufleetError) as err:
        decide(_buy(), yes=False, dry_run=False, interactive=True, ask=lambda q: False)
    assert err.value.exit_code == 1 and "changed nothing" in str(err.value)


def test_the_table_compresses_slots_and_sums_the_hourly_cost():
    b = ChangeSetBuilder("pool replace", "prod")
    b.add("launch", "instance", "prod-b0001-n00007", "replaces i-0abc", usd_per_hour=55.04)
    b.add("terminate", "instance", "prod-b0001-n00007", "i-0abc", usd_per_hour=55.04)
    b.add("drain", "pool-node", "prod-b0001-n00007")
    text = _buy(12).render()
    assert "launch       12 instance: prod-b0001-n[00000-00011]" in text
    assert "cost per hour: +$660.48" in text
    replace = b.build()
    assert replace.usd_per_hour_delta == 0.0
    lines = replace.render().splitlines()
    assert [ln.split()[0] for ln in lines[1:] if ln.split()[1].isdigit()] == ["launch", "drain", "terminate"]
    assert "replaces i-0abc" in replace.render()


def test_an_unpriced_launch_makes_the_cost_unknown_not_smaller():
    b = ChangeSetBuilder("rollout", "prod", price_note="no price for p5.48xlarge: set gpufleet:cost.pricePerInstanceHour")
    b.add("launch", "instance", "a1", usd_per_hour=10.0)
    b.add("launch", "instance", "a2")
    cs = b.build()
    assert cs.usd_per_hour_delta is None
    assert "cost per hour: unknown (no price for p5.48xlarge" in cs.render()
    assert cs.to_json()["usd_per_hour_delta"] is None


def test_json_is_snake_case_and_complete():
    doc = _buy(2).to_json()
    assert doc["summary"] == [{"action": "launch", "kind": "instance", "count": 2,
                               "targets": "prod-b0001-n[00000-00001]"}]
    assert len(doc["changes"]) == 2 and doc["usd_per_hour_delta"] == pytest.approx(110.08)


def test_compress_keeps_padding_order_and_odd_names():
    assert compress(["n001", "n002", "n003", "fsx", "n010", "n011"]) == "n[001-003],fsx,n[010-011]"
    assert compress(["a9", "a10"]) == "a9,a10"  # different widths are not one run
    assert compress([]) == ""


def test_an_unknown_action_is_a_programming_error():
    with pytest.raises(ValueError, match="not one of"):
        Change("buy", "instance", "x")
