"""`gpufleet.ops.server` on a real socket in this process, its decisions replaced by a recorder: the
per-caller rate limit (429, audited, nothing applied) beside the alert budget, refusals that
apply nothing, a page command that runs after the answer, answers that name no pid or host."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from gpufleet.errors import LockHeld
from gpufleet.ops import actions, server
from gpufleet.ops.webhook import Notification, Page
from gpufleet.pool.protocol import PoolState
from tests.ops.alertmanager import alert, notification

TOKEN = "t" * 43


class Bench:
    def __init__(self, apply: Callable[[Notification], dict[str, Any]], settings: server.Settings,
                 pager: server.Pager | None = None) -> None:
        self.applied: list[Notification] = []
        self.audited: list[tuple[str, str, dict[str, Any]]] = []

        def recorded(note: Notification) -> dict[str, Any]:
            self.applied.append(note)
            return apply(note)

        self.httpd = server.serve("127.0.0.1", 0, apply=recorded, pool_state=PoolState, settings=settings,
                                  audit=lambda what, why, details: self.audited.append((what, why, details)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def post(self, body: dict[str, Any] | bytes, token: str | None = TOKEN) -> tuple[int, str]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url, data=data, headers=headers), timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def refused(self) -> list[int]:
        return [d["status"] for what, _, d in self.audited if what == "webhook refused"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def bench() -> Iterator[Callable[..., Bench]]:
    made: list[Bench] = []

    def make(apply: Callable[[Notification], dict[str, Any]] = lambda n: {"quarantined": []}, **kw: Any) -> Bench:
        made.append(Bench(apply, server.Settings(token=TOKEN, **kw)))
        return made[-1]

    yield make
    for b in made:
        b.close()


def test_a_caller_past_its_rate_gets_429_audited_and_nothing_applied(bench: Callable[..., Bench]) -> None:
    b = bench(rate=0.01, burst=2)
    codes = [b.post(notification(alert(f"n{i}")))[0] for i in range(4)]
    assert codes == [200, 200, 429, 429]
    assert len(b.applied) == 2 and [n.alerts[0].labels["node"] for n in b.applied] == ["n0", "n1"]
    assert b.refused() == [429, 429]
    accepted = [d for what, _, d in b.audited if what == "webhook accepted"]
    assert [d["caller"] for d in accepted] == ["127.0.0.1"] * 2


def test_refused_calls_401_400_413_apply_nothing_and_each_is_audited(bench: Callable[..., Bench]) -> None:
    b = bench()
    assert b.post(notification(alert("n1")), token=None)[0] == 401
    assert b.post(notification(alert("n1")), token="u" * 43)[0] == 401
    assert b.post(b"{not json")[0] == 400
    assert b.post({"version": "4", "alerts": "x"})[0] == 400
    port = b.httpd.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                  f"Content-Length: {server.MAX_BODY + 1}\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.0 413")
    assert b.applied == [] and b.refused() == [401, 401, 400, 400, 413]
    assert TOKEN not in json.dumps(b.audited) and "u" * 43 not in json.dumps(b.audited)


def test_a_slow_page_command_runs_after_the_answer_never_inside_the_request(bench: Callable[..., Bench],
                                                                            tmp_path: Path) -> None:
    out = tmp_path / "pages.json"
    pager = server.Pager(lambda pages: actions.page(pages, "s", ["sh", "-c", f"sleep 3; cat > {out}"]))
    page = Page("GpuXidFatal", "n1", "partition train is at its alert budget", {"labels": {"node": "n1"}})

    def apply(note: Notification) -> dict[str, Any]:  # as actions.handle does with its pager
        pager([page])
        return {"quarantined": [], "paged": [{"slot": "n1", "alertname": "GpuXidFatal"}]}

    b = bench(apply)
    started = time.monotonic()
    code, body = b.post(notification(alert("n1", action="page")))
    took = time.monotonic() - started
    assert code == 200 and json.loads(body)["paged"] and took < 2.0, took
    assert not out.exists()  # the page command is still sleeping
    deadline = time.monotonic() + 20
    while not (out.exists() and out.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert json.loads(out.read_text())["pages"][0]["slot"] == "n1"
    pager.stop()


def test_no_answer_names_a_pid_or_a_host(bench: Callable[..., Bench]) -> None:
    holder = f"pid {os.getpid()} on {socket.gethostname()}"

    def broken(note: Notification) -> dict[str, Any]:
        raise RuntimeError(f"the stack's lock is held by {holder}")

    b = bench(broken)
    code, body = b.post(notification(alert("n1")))
    assert code == 503 and str(os.getpid()) not in body and socket.gethostname() not in body

    tries: list[int] = []

    def held(note: Notification) -> dict[str, Any]:  # held past the answer's wait, then free
        tries.append(1)
        if len(tries) < 4:
            raise LockHeld(f"the stack's lock is held by {holder}")
        return {"quarantined": []}

    b2 = bench(held, answer_wait_s=0.5)
    code, body = b2.post(notification(alert("n2")))
    assert code == 202 and str(os.getpid()) not in body and socket.gethostname() not in body
