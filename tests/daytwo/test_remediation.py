"""The remediation ladder: its table against NVIDIA's Xid catalog, the stack's override, `gpufleet ops
remediation`, and the ladder climbed on the simulator for each reason class (a GPU reset applies a
pending row remap, a reboot cures a GSP RPC timeout, a fatal ECC needs a new instance), a step that
runs past its time moving down the ladder, and an open circuit breaker stopping it.

The catalog is tests/fixtures/real/xid_catalog__derived_from_gpud_catalog_generated.csv (NVIDIA's
r590 catalog via gpud's generated copy; see that folder's SOURCES.md)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpufleet.daytwo import lifecycle, remediation
from gpufleet.daytwo.context import open_day_two
from gpufleet.daytwo.remediation_run import run_ladder
from gpufleet.errors import ConfigError
from gpufleet.project import load_project
from tests.daytwo.fleet import STACK, admitted, daytwo_events, gpufleet, pool_doc, state_dir

CATALOG = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "xid_catalog__derived_from_gpud_catalog_generated.csv"


def test_every_xid_row_is_the_catalogs_immediate_action() -> None:
    rows = {int(r["code"]): r for r in csv.DictReader(CATALOG.open())}
    for xid, action in remediation.XID_IMMEDIATE_ACTION.items():
        assert rows[xid]["immediate_action"] == action, xid
    assert remediation.ladder_for("xid-48") == ("replace", "quarantine")  # WORKFLOW_XID_48: the memory failed
    assert remediation.ladder_for("xid-79") == ("reboot", "replace", "quarantine")  # RESTART_BM
    assert remediation.ladder_for("xid-119")[:2] == ("reset-gpu", "reboot")  # RESET_GPU
    assert remediation.ladder_for("xid-9999") == remediation.BY_CATALOG_ACTION["RESET_GPU"]  # unlisted: the default
    for _code, steps, _src in remediation.table():
        assert steps[-1] == "quarantine" and len(set(steps)) == len(steps)


def test_a_stack_override_wins_and_a_bad_one_names_its_field() -> None:
    over = {"xid-119": ("reboot", "quarantine"), "my-code": ("replace", "quarantine")}
    assert remediation.ladder_for("xid-119", over) == ("reboot", "quarantine")
    assert ("my-code", ("replace", "quarantine"), "stack override (gpufleet:ops.remediation)") in remediation.table(over)
    with pytest.raises(ConfigError, match=r"gpufleet:ops.remediation.xid-119.*unknown remediation step"):
        remediation.ladder_for("xid-119", {"xid-119": ("power-cycle", "quarantine")})
    with pytest.raises(ConfigError, match="does not end in quarantine"):
        remediation.check_override({"x": ("reboot",)})


def test_the_command_shows_the_table_in_force(fleet) -> None:
    out = gpufleet(fleet, "ops", "remediation", "-s", STACK)
    assert out.exit_code == 0, out.output
    assert "xid-119" in out.output and "reset-gpu -> reboot -> replace -> quarantine" in out.output
    assert "NVIDIA Xid catalog: RESET_GPU" in out.output
    doc = json.loads(gpufleet(fleet, "ops", "remediation", "-s", STACK, "--json").output)
    assert (doc["kind"], doc["stack"]) == ("remediation", STACK)  # the envelope (issue 23 item 8)
    rows = doc["rows"]
    assert {"code": "ecc-uncorrectable", "steps": ["replace", "quarantine"], "source": "gpufleet table"} in rows


def _faulty(fleet, kind: str, index: int = 0) -> str:
    """An admitted node that develops `kind` now and is quarantined with the gates' code for it."""
    slot = admitted(fleet)[index]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", kind).exit_code == 0
    with open_day_two(STACK, "test", project=load_project(fleet)) as d:
        lifecycle.quarantine(d, slot, kind, f"the gates found {kind}", "alert")
    return slot


def _ladder_events(fleet, slot: str) -> list[tuple[str, str | None]]:
    return [(e["to"], e.get("step")) for e in daytwo_events(fleet) if e["type"] == "remediation" and e["slot"] == slot]


@pytest.mark.parametrize(("kind", "cured_by", "tried"), [
    ("row-remap-pending", "reset-gpu", ["reset-gpu"]),  # a GPU reset applies the pending remap
    ("xid-119", "reboot", ["reset-gpu", "reboot"]),  # GSP RPC timeout: the reset does not cure it, a reboot does
    ("ecc-uncorrectable", "replace", ["replace"]),  # a bad HBM stack: a new instance
])
def test_the_ladder_cures_each_reason_class_with_its_step_and_the_gate(fleet, kind, cured_by, tried) -> None:
    slot = _faulty(fleet, kind)
    before = json.loads((state_dir(fleet) / "records" / f"{slot}.json").read_text())  # the rollout's record
    out = gpufleet(fleet, "ops", "remediation", "run", "-s", STACK, slot, "--reason", "alert quarantine")
    assert out.exit_code == 0, out.output
    assert f"cured by {cured_by}" in out.output
    steps = _ladder_events(fleet, slot)
    assert steps == [("started", None)] + [("step", s) for s in tried] + [("finished", None)]
    node = pool_doc(fleet)["nodes"][slot]
    assert node["state"] == "admitted"
    record = json.loads((state_dir(fleet) / "records" / f"{slot}.json").read_text())  # a fresh admission record
    assert record["slot"] == slot and record["decided_at"] > before["decided_at"]
    assert (record["instance_id"] != before["instance_id"]) is (cured_by == "replace")
    audit = [json.loads(line) for line in (state_dir(fleet) / "audit.jsonl").read_text().splitlines()]
    assert [(a["what"], a["target"]) for a in audit][-1] == ("remediation", slot)


def test_a_step_that_runs_past_its_time_fails_and_the_ladder_moves_down(fleet) -> None:
    slot = _faulty(fleet, "xid-119")
    with open_day_two(STACK, "test", project=load_project(fleet)) as d:
        out = run_ladder(d, slot, "alert quarantine", step_timeout_s=1)  # the simulator models minutes a step
    assert [(s["step"], s["result"]) for s in out.steps] == [("reset-gpu", "failed"), ("reboot", "failed"),
                                                             ("replace", "cured")]
    assert "timed out" in out.steps[0]["detail"] and out.cured_by == "replace"


def test_an_uncured_node_ends_out_for_service_and_an_open_breaker_stops_the_ladder(fleet) -> None:
    project = load_project(fleet)
    stack = fleet / "stacks" / f"Pulumi.{STACK}.yaml"
    stack.write_text(stack.read_text().replace(
        "config:\n", "config:\n  gpufleet:ops:\n    remediation:\n      xid-119: [reset-gpu, quarantine]\n", 1))
    slot = _faulty(fleet, "xid-119")
    out = gpufleet(fleet, "ops", "remediation", "run", "-s", STACK, slot, "--reason", "alert quarantine")
    assert out.exit_code == 3 and "ended in quarantine for service" in out.output
    assert _ladder_events(fleet, slot) == [("started", None), ("step", "reset-gpu"), ("step", "quarantine"),
                                           ("finished", None)]
    assert pool_doc(fleet)["nodes"][slot]["state"] == "quarantined"

    other = _faulty(fleet, "row-remap-pending", index=1)
    with open_day_two(STACK, "test", project=project) as d:
        d.journal.append({"type": "breaker", "to": "tripped", "scope": "fleet", "reason": "a storm", "who": "test"})
        stopped = run_ladder(d, other, "alert quarantine")
    assert stopped.stopped and "circuit breaker" in stopped.stopped and stopped.steps == []
    assert pool_doc(fleet)["nodes"][other]["state"] == "quarantined"


def test_the_ladder_refuses_a_node_that_is_not_quarantined(fleet) -> None:
    out = gpufleet(fleet, "ops", "remediation", "run", "-s", STACK, admitted(fleet)[0], "--reason", "why not")
    assert out.exit_code == 2 and "takes a quarantined node" in out.output
