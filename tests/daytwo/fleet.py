"""A rolled-out simulated stack to run day-two operations on: `crash40` (40 nodes, faults seeded,
one slot blacklisted by the rollout), rolled out once per session and copied for each test."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpufleet.cli import main
from gpufleet.durable import write_atomic
from tests.rollout.project import make_project

STACK = "crash40"


def rolled_out(base: Path) -> Path:
    project = make_project(base / "project")
    out = CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", STACK])
    assert out.exit_code == 0, out.output
    return project


def copy_project(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


# Fixtures for tests/daytwo (a pytest plugin of the root conftest, so that tests elsewhere, such as
# tests/ops, share them): one rollout per session.

@pytest.fixture(scope="session")
def fleet_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rolled_out(tmp_path_factory.mktemp("daytwo-fleet"))


@pytest.fixture
def fleet(fleet_base: Path, tmp_path: Path) -> Path:
    """A fresh copy of the rolled-out crash40 project for one test."""
    return copy_project(fleet_base, tmp_path / "project")


def gpufleet(project: Path, *args: str, actor: str = "alice@ops") -> Result:
    return CliRunner(env={"GPUFLEET_ACTOR": actor}).invoke(main, ["--project", str(project), *args])


def state_dir(project: Path) -> Path:
    return project / ".gpufleet" / STACK


def pool_doc(project: Path) -> dict[str, Any]:
    return json.loads((state_dir(project) / "pool.json").read_text())


def daytwo_events(project: Path) -> list[dict[str, Any]]:
    path = state_dir(project) / "daytwo.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ledger(project: Path) -> list[dict[str, Any]]:
    path = state_dir(project) / "sim" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def admitted(project: Path) -> list[str]:
    """Admitted slots that never failed (the rollout's replaced slots carry a failure)."""
    return sorted(s for s, n in pool_doc(project)["nodes"].items() if n["state"] == "admitted" and not n["failures"])


def set_busy(project: Path, slot: str, busy: bool = True, work: str | None = None) -> None:
    """A job lands on (or leaves) a node of the simulated pool, as the scheduler would show it;
    `work`: the job's name, which the pool reports when the job holds a drain."""
    path = state_dir(project) / "pool.json"
    doc = json.loads(path.read_text())
    doc["nodes"][slot]["busy"] = busy
    names = doc.setdefault("work", {})
    if busy and work is not None:
        names[slot] = work
    else:
        names.pop(slot, None)
    if not names:
        del doc["work"]
    write_atomic(path, json.dumps(doc, sort_keys=True))
    os.utime(path)
