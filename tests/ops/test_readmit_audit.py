"""`gpufleet pool readmit` gates a quarantined node again (simulated crash40 stack), and the audit
log: one entry per fleet-changing command, who and why, `gpufleet history`, no secret in it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.pool.factory import pool_for
from gpufleet.project import find_project
from gpufleet.spec import load_stack_path
from tests.daytwo.fleet import copy_project, daytwo_events, gpufleet, pool_doc, state_dir
from tests.ops.serving import STACK, fleet_base  # noqa: F401 - fixture

CANARY = "AKIAZZCANARY0SECRET0VALUE0123456789"


@pytest.fixture
def fleet(fleet_base: Path, tmp_path: Path) -> Path:
    return copy_project(fleet_base, tmp_path / "project")


def _quarantine(project: Path, slot: str) -> None:
    """What an alert does (tests/ops/test_webhook_server.py drives the real path)."""
    p = find_project(project)
    pool_for(load_stack_path(p.stack_file(STACK)), p, STACK).quarantine(slot, "GpuXidFatal", "alert GpuXidFatal")


def _audit(project: Path) -> list[dict[str, Any]]:
    """The entries after the fixture's rollout (which left the first one)."""
    path = state_dir(project) / "audit.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    assert [e["what"] for e in entries[:1]] == ["rollout"]
    return entries[1:]


def _healthy(project: Path) -> list[str]:
    return sorted(s for s, n in pool_doc(project)["nodes"].items() if n["state"] == "admitted" and not n["failures"])


def test_a_quarantined_healthy_node_is_gated_and_admitted_again(fleet: Path) -> None:
    slot = _healthy(fleet)[5]
    _quarantine(fleet, slot)
    before = pool_doc(fleet)["nodes"][slot]
    assert before["state"] == "quarantined" and before["failures"] == 1
    out = gpufleet(fleet, "pool", "readmit", "-s", STACK, slot, "--reason", "GPU reset, alert resolved", actor="bob@ops")
    assert out.exit_code == 0, out.output
    node = pool_doc(fleet)["nodes"][slot]
    assert node["state"] == "admitted" and node["failures"] == 1 and node["record_digest"]
    assert json.loads((state_dir(fleet) / "records" / f"{slot}.json").read_text())["action"] == "admit"
    event = daytwo_events(fleet)[-1]
    assert (event["action"], event["who"], event["state"]) == ("readmit", "bob@ops", "admitted")
    (entry,) = _audit(fleet)
    assert (entry["what"], entry["target"], entry["who"], entry["why"]) == \
        ("pool readmit", slot, "bob@ops", "GPU reset, alert resolved")


def test_a_node_still_faulty_fails_again_and_is_blacklisted(fleet: Path) -> None:
    slot = _healthy(fleet)[6]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-79").exit_code == 0
    _quarantine(fleet, slot)
    out = gpufleet(fleet, "pool", "readmit", "-s", STACK, slot, "--reason", "try again")
    assert out.exit_code == 3, out.output
    node = pool_doc(fleet)["nodes"][slot]
    assert node["state"] == "blacklisted" and node["failures"] == 2
    assert _audit(fleet)[-1]["details"]["state"] == "blacklisted"


def test_readmit_refuses_admitted_and_blacklisted_slots(fleet: Path) -> None:
    slot = _healthy(fleet)[7]
    assert gpufleet(fleet, "pool", "readmit", "-s", STACK, slot, "--reason", "x").exit_code == 2
    assert gpufleet(fleet, "pool", "blacklist", "-s", STACK, slot, "--reason", "bad board").exit_code == 0
    out = gpufleet(fleet, "pool", "readmit", "-s", STACK, slot, "--reason", "x")
    assert out.exit_code == 1 and "blacklisted" in out.output
    assert pool_doc(fleet)["nodes"][slot]["state"] == "blacklisted"


def test_every_fleet_changing_command_leaves_one_entry_and_no_secret(fleet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CANARY)
    monkeypatch.setenv("GPUFLEET_API_TOKEN", CANARY[::-1])
    a, b = _healthy(fleet)[8:10]
    _quarantine(fleet, b)
    commands = [("pool", "blacklist", "-s", STACK, a, "--reason", f"bad board; key was {CANARY}"),
                ("pool", "clear", "-s", STACK, a, "--reason", "board swapped"),
                ("pool", "readmit", "-s", STACK, b, "--reason", f"token {CANARY[::-1]} rotated")]
    for argv in commands:
        out = gpufleet(fleet, *argv, actor="carol@ops")
        assert out.exit_code == 0, out.output
    entries = _audit(fleet)
    assert [(e["what"], e["target"], e["who"]) for e in entries] == [
        ("pool blacklist", a, "carol@ops"), ("pool clear", a, "carol@ops"), ("pool readmit", b, "carol@ops")]
    text = (state_dir(fleet) / "audit.jsonl").read_text()
    assert CANARY not in text and CANARY[::-1] not in text and "[redacted]" in entries[0]["why"]
    history = gpufleet(fleet, "history", "-s", STACK, "--json")
    doc = json.loads(history.output)  # one document with the envelope (issue 23 item 8), was one line per record
    assert history.exit_code == 0 and (doc["kind"], doc["stack"]) == ("history", STACK)
    assert [r["what"] for r in doc["records"]] == ["rollout", "pool blacklist", "pool clear", "pool readmit"]
    assert gpufleet(fleet, "history", "-s", STACK, "--since", "2999-01-01").output == ""
    assert gpufleet(fleet, "history", "-s", STACK, "--since", "yesterday").exit_code == 2
    plain = gpufleet(fleet, "history", "-s", STACK).output.splitlines()
    assert plain[-1].endswith(f"carol@ops  pool readmit {b}: token [redacted] rotated")


def test_scrub_masks_secret_keys_and_values_anywhere() -> None:
    from gpufleet.ops.audit import entry

    e = entry(stack="s", who="w", what="x", why=f"pasted {CANARY}", details={"password": "hunter2", "nested": [
        {"aws_session_token": "abc"}, f"..{CANARY}.."]}, env={"MY_SECRET": CANARY, "HOME": "/root"})
    assert CANARY not in json.dumps(e)
    assert e["details"]["password"] == "[redacted]" and e["details"]["nested"][0]["aws_session_token"] == "[redacted]"
    assert e["why"] == "pasted [redacted]"
