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


@pytest.mark.slow  # a rollout of 40 nodes, ops serve, an upgrade of 40 nodes
def test_the_canary_appears_in_no_file_a_rollout_an_alert_and_an_upgrade_write(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """One project, the canary planted all along: in the environment of the rollout, of ops serve
    and of the upgrade (a secret-named variable), in an alert's annotations and in an operator's
    --reason; then every file under the project is searched."""
    from tests.daytwo.fleet import gpufleet, rolled_out, state_dir
    from tests.daytwo.test_upgrade import retarget
    from tests.ops import serving

    monkeypatch.setenv("GPUFLEET_CANARY_TOKEN", CANARY)
    monkeypatch.setenv("GPUFLEET_PROJECT", str(tmp_path / "a" / "project"))  # the upgrade's in-process program
    project = rolled_out(tmp_path / "a")  # 1. a rollout
    serving.write_token(project)
    with serving.start(project, tmp_path / "serve.log", [], {"GPUFLEET_CANARY_TOKEN": CANARY}) as served:
        slots = sorted(pool_doc(project)["nodes"])
        leaky = alert(slots[3], name="GpuRowRemapFailure")  # 2. an alert
        leaky["annotations"] |= {"summary": f"remap failed; db password is {CANARY}", "password": CANARY,
                                 "api_token": CANARY}
        assert served.send(leaky)[0] in (200, 202)
        deadline = time.monotonic() + 30
        while pool_doc(project)["nodes"][slots[3]]["state"] == "admitted":
            assert time.monotonic() < deadline, served.log_text()[-2000:]
            time.sleep(0.2)
        log = served.log_text()
    blacklisted = gpufleet(project, "pool", "blacklist", "-s", "crash40", slots[5], "--reason",
                           f"HBM errors; ticket token {CANARY}")
    assert blacklisted.exit_code == 0, blacklisted.output
    retarget(project)
    upgraded = gpufleet(project, "upgrade", "-s", "crash40")  # 3. an upgrade
    assert upgraded.exit_code == 0, upgraded.output
    assert json.loads((state_dir(project) / "pool.json").read_text())  # the run wrote its state
    assert CANARY not in log and CANARY not in upgraded.output
    assert _files_with(project, CANARY) == []
    written = {p.name for p in (project / ".gpufleet" / "crash40").rglob("*") if p.is_file()}
    assert {"journal.jsonl", "daytwo.jsonl", "pool.json", "audit.jsonl"} <= written
    assert any(e.get("action") == "upgrade" or "upgrade" in json.dumps(e)
               for e in map(json.loads, (state_dir(project) / "daytwo.jsonl").read_text().splitlines()))
