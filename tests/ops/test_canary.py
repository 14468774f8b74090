"""A planted canary secret (an environment secret, an alert's `password`/`api_token` annotations and
summary, an operator's `--reason`) appears in no file an alert and a pool command write, nor in
the service log."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from tests.daytwo.fleet import pool_doc
from tests.ops.alertmanager import alert
from tests.ops.serving import Served, fleet_base, served  # noqa: F401 - fixtures

CANARY = "canary-3b9d41e2-do-not-leak"


@pytest.fixture
def serve_env() -> dict[str, str]:
    return {"GPUFLEET_CANARY_TOKEN": CANARY}


def _files_with(root: Path, needle: str) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_the_canary_appears_in_no_file_an_alert_and_a_blacklist_write(served: Served,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_CANARY_TOKEN", CANARY)
    slots = sorted(pool_doc(served.project)["nodes"])
    leaky = alert(slots[1], name="GpuRowRemapFailure")
    leaky["annotations"] |= {"summary": f"remap failed; db password is {CANARY}", "password": CANARY,
                             "api_token": CANARY}
    code, _ = served.send(leaky, *[alert(s) | {"annotations": {"summary": CANARY}} for s in slots[2:12]])
    assert code in (200, 202)
    deadline = time.monotonic() + 30
    while pool_doc(served.project)["nodes"][slots[1]]["state"] == "admitted":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    result = CliRunner().invoke(main, ["--project", str(served.project), "pool", "blacklist", "-s", "crash40",
                                       slots[20], "--reason", f"HBM errors; ticket token {CANARY}"])
    assert result.exit_code == 0, result.output
    served.wait_log("PAGE stack=crash40")
    time.sleep(0.5)  # the pager thread audits its pages before it logs them
    assert _files_with(served.project, CANARY) == []
    assert CANARY not in served.log_text()
    # what was written still says what happened, masked
    events = [json.loads(line) for line in (served.project / ".gpufleet/crash40/daytwo.jsonl").read_text().splitlines()]
    quarantine = next(e for e in events if e.get("slot") == slots[1] and e.get("action") == "quarantine")
    assert quarantine["evidence"]["annotations"]["password"] == "[redacted]"
    assert "db password is [redacted]" in quarantine["why"]
    for name in ("pool.json", "audit.jsonl", "daytwo.jsonl", "journal.jsonl"):
        assert (served.project / ".gpufleet/crash40" / name).stat().st_mode & 0o077 == 0, name
