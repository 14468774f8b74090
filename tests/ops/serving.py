"""`gpufleet ops serve` as a process on 127.0.0.1 for the tests, on a copy of a rolled-out simulated
stack (crash40: 40 admitted nodes, all in partition train)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.daytwo.fleet import copy_project, rolled_out, state_dir
from tests.ops.alertmanager import notification

STACK = "crash40"


@pytest.fixture(scope="module")
def fleet_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rolled_out(tmp_path_factory.mktemp("ops-fleet"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_token(project: Path) -> Path:
    """The stack's webhook token, as `gpufleet ops token` writes it (0600, under the state dir)."""
    path = state_dir(project) / "webhook.token"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(0o600)
    return path


class Served:
    def __init__(self, project: Path, port: int, proc: subprocess.Popen[str], log: Path, token: str) -> None:
        self.project, self.url, self.proc, self.log = project, f"http://127.0.0.1:{port}", proc, log
        self.token = token

    def post(self, body: bytes, token: str | None = "") -> tuple[int, dict[str, Any]]:
        """POST with the stack's token (`token=None`: without one; a string: that one)."""
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token or self.token}"
        req = urllib.request.Request(self.url + "/", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def send(self, *alerts: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return self.post(json.dumps(notification(*alerts)).encode())

    def log_text(self) -> str:
        return self.log.read_text()

    def wait_log(self, text: str, count: int = 1, timeout: float = 30) -> str:
        """The log once it holds `text` `count` times (pages are sent by their own thread)."""
        deadline = time.monotonic() + timeout
        while (log := self.log_text()).count(text) < count:
            assert time.monotonic() < deadline, f"{text!r} not logged {count} times:\n{log[-3000:]}"
            time.sleep(0.1)
        return log


@contextlib.contextmanager
def start(project: Path, log: Path, serve_args: list[str], serve_env: dict[str, str]) -> Iterator[Served]:
    """`gpufleet ops serve` on `project` (which has a token) as a process, until the block ends."""
    token = (state_dir(project) / "webhook.token").read_text().strip()
    port = free_port()
    env = dict(os.environ, GPUFLEET_ACTOR="ops-test", **serve_env)
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from gpufleet.cli import main; main()", "--project", str(project), "ops", "serve", "-s", STACK,
                                 "--listen", f"127.0.0.1:{port}", *serve_args], stdout=out, stderr=subprocess.STDOUT, text=True,
                                env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("ops serve did not listen within 60 s: " + log.read_text())
    try:
        yield Served(project, port, proc, log, token)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def served(fleet_base: Path, tmp_path: Path, serve_args: list[str], serve_env: dict[str, str]) -> Iterator[Served]:
    project = copy_project(fleet_base, tmp_path / "project")
    write_token(project)
    with start(project, tmp_path / "serve.log", serve_args, serve_env) as s:
        yield s
