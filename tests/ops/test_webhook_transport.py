"""`gpufleet ops serve`'s transport on a rolled-out simulated stack (crash40, 40 nodes in train):
the bearer token, bounded bodies, a stalled connection beside 50 concurrent notifications, an
operator's `pool blacklist` during a flood, log lines an alert cannot forge, every call audited."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from tests.daytwo.fleet import pool_doc, state_dir
from tests.ops.alertmanager import alert, notification
from tests.ops.serving import Served, fleet_base, served  # noqa: F401 - fixtures

TIMEOUT_S = 2.0
OUT = ("quarantined", "blacklisted")


@pytest.fixture
def serve_args() -> list[str]:  # this module's server closes stalled connections after 2 s
    return ["--timeout", str(TIMEOUT_S)]


def _nodes(project: Path) -> dict[str, dict[str, Any]]:
    return pool_doc(project)["nodes"]


def _calls(project: Path, what: str) -> list[dict[str, Any]]:
    path = state_dir(project) / "audit.jsonl"
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["what"] == what]


def test_without_the_token_nothing_happens_and_the_refusal_is_audited(served: Served) -> None:
    before = _nodes(served.project)
    slot = sorted(before)[5]
    body = json.dumps(notification(alert(slot))).encode()
    assert served.post(body, token=None)[0] == 401
    assert served.post(body, token="x" * 43)[0] == 401
    time.sleep(0.5)
    assert _nodes(served.project) == before
    refused = _calls(served.project, "webhook refused")
    assert [(e["details"]["status"], e["who"]) for e in refused] == [(401, "webhook caller 127.0.0.1")] * 2
    assert served.token not in (state_dir(served.project) / "audit.jsonl").read_text()
    assert served.token not in served.log_text()
    assert served.post(body)[0] == 200  # with it
    assert _nodes(served.project)[slot]["state"] != "admitted"  # out of work (the decision is webhook's)
    assert len(_calls(served.project, "webhook accepted")) == 1


def test_an_oversized_body_is_413_before_it_is_read(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(f"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.token}\r\n"
                  f"Content-Length: {64 * 2**20}\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.0 413")
    assert _calls(served.project, "webhook refused")[0]["details"]["status"] == 413


def test_a_stalled_connection_is_closed_while_fifty_concurrent_notifications_are_all_answered(
        served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    stalled = socket.create_connection(("127.0.0.1", port), timeout=30)
    stalled.sendall(b"GET /m")  # and nothing more
    slots = sorted(_nodes(served.project))
    answers: list[int] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        code, _ = served.send(alert(slots[i % len(slots)], name=f"GpuXidFatal{i}"))
        with lock:
            answers.append(code)

    started = time.monotonic()
    threads = [threading.Thread(target=send, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    took = time.monotonic() - started
    assert len(answers) == 50 and set(answers) <= {200, 202}, answers
    stalled.settimeout(TIMEOUT_S * 5)
    assert stalled.recv(100) == b""  # the server closed it after its read timeout
    stalled.close()
    quarantined = [s for s, n in _nodes(served.project).items() if n["state"] in OUT]
    deadline = time.monotonic() + 60
    while len(_calls(served.project, "webhook accepted")) < 50 or len(quarantined) < 4:
        assert time.monotonic() < deadline
        time.sleep(0.2)
        quarantined = [s for s, n in _nodes(served.project).items() if n["state"] in OUT]
    assert len(quarantined) == 4  # the alert budget, 10% of 40, holds across concurrent notifications
    print(f"50 concurrent notifications beside a stalled connection answered in {took:.1f} s")


def test_pool_blacklist_succeeds_during_a_flood_of_alerts(served: Served) -> None:
    slots = sorted(_nodes(served.project))
    stop = threading.Event()
    sends: list[tuple[float, float]] = []  # (sent, answered) of every notification

    def flood() -> None:
        i = 0
        while not stop.is_set():
            began = time.monotonic()
            served.send(alert(slots[i % 20], name=f"GpuXidFatal{i}"))
            sends.append((began, time.monotonic()))
            i += 1

    floods = [threading.Thread(target=flood) for _ in range(4)]
    for t in floods:
        t.start()
    windows: list[tuple[float, float]] = []
    try:
        time.sleep(1)
        results = []
        for slot in slots[30:35]:
            began = time.monotonic()
            results.append(CliRunner().invoke(main, ["--project", str(served.project), "pool", "blacklist", "-s",
                                                     "crash40", slot, "--reason", "operator: bad HBM"]))
            windows.append((began, time.monotonic()))
    finally:
        stop.set()
        for t in floods:
            t.join(60)
    assert [r.exit_code for r in results] == [0] * 5, [r.output for r in results]
    assert all(_nodes(served.project)[s]["state"] == "blacklisted" for s in slots[30:35])
    # every blacklist ran while notifications were in flight (sent, not yet answered); how many
    # were answered meanwhile depends on the machine (each sender waits for its answer)
    assert all(any(a < end and b > start for a, b in sends) for start, end in windows), (windows, sends)
    assert len(_calls(served.project, "webhook accepted")) >= len(floods)


def test_an_alert_name_with_a_newline_forges_no_log_line(served: Served) -> None:
    served.send(alert("gpu-not-here", name="GpuXid\n2026-12-01 00:00:00,000 WARNING quarantined everything"))
    log = served.wait_log("ignored alert GpuXid")
    assert not any(line.startswith("2026-12-01 00:00:00,000 WARNING") for line in log.splitlines())
    assert "GpuXid\\x0a2026-12-01" in log


def test_history_verify_passes_then_names_an_edited_record_with_exit_4(served: Served) -> None:
    served.send(alert(sorted(_nodes(served.project))[9]))
    run = lambda: CliRunner().invoke(main, ["--project", str(served.project), "history", "-s", "crash40",  # noqa: E731
                                            "--verify"])
    ok = run()
    assert ok.exit_code == 0 and "the chain verifies" in ok.output, ok.output
    path = state_dir(served.project) / "audit.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"who": "', '"who": "not-', 1)
    path.write_text("\n".join(lines) + "\n")
    broken = run()
    assert broken.exit_code == 4 and "record 2 breaks the chain" in broken.output, broken.output
    from gpufleet.reports.drift_run import AUDIT_CHAIN, audit_chain_findings

    (finding,) = audit_chain_findings(state_dir(served.project))  # what `gpufleet drift` reports
    assert (finding.check, finding.field, finding.layer.value) == (AUDIT_CHAIN, "record 2", "software")


def test_without_a_token_file_serve_refuses_to_start(fleet_base: Path, tmp_path: Path) -> None:
    from tests.daytwo.fleet import copy_project

    project = copy_project(fleet_base, tmp_path / "p")
    result = CliRunner().invoke(main, ["--project", str(project), "ops", "serve", "-s", "crash40", "--listen",
                                       "127.0.0.1:9797"])  # refused before it binds
    assert result.exit_code == 2 and "webhook token cannot be read" in result.output, result.output
    token = CliRunner().invoke(main, ["--project", str(project), "ops", "token", "-s", "crash40"])
    path = Path(token.output.strip())
    assert token.exit_code == 0 and path.stat().st_mode & 0o777 == 0o600 and len(path.read_text().strip()) >= 40
    assert path.read_text().strip() not in token.output
    again = CliRunner().invoke(main, ["--project", str(project), "ops", "token", "-s", "crash40"])
    assert again.exit_code == 2 and "--rotate" in again.output

