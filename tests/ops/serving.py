"""`gpufleet ops serve` as a process on 127.0.0.1 for the tests, on a copy of a rolled-out simulated
stack (crash40: 40 admitted nodes, all in partition train)."""

from __future__ import annotations

import json
import os
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

from tests.daytwo.fleet import copy_project, rolled_out
from tests.ops.alertmanager import notification

STACK = "crash40"


@pytest.fixture(scope="module")
def fleet_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rolled_out(tmp_path_factory.mktemp("ops-fleet"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(self, project: Path, port: int, proc: subprocess.Popen[str], log: Path) -> None:
        self.project, self.url, self.proc, self.log = project, f"http://127.0.0.1:{port}", proc, log

    def post(self, body: bytes) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(self.url + "/", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def send(self, *alerts: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return self.post(json.dumps(notification(*alerts)).encode())

    def log_text(self) -> str:
        return self.log.read_text()


@pytest.fixture
def served(fleet_base: Path, tmp_path: Path) -> Iterator[Served]:
    project = copy_project(fleet_base, tmp_path / "project")
    port, log = free_port(), tmp_path / "serve.log"
    env = dict(os.environ, GPUFLEET_ACTOR="ops-test")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from gpufleet.cli import main; main()", "--project", str(project), "ops", "serve", "-s", STACK,
                                 "--listen", f"127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT, text=True,
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
        yield Served(project, port, proc, log)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


