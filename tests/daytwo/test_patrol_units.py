"""The documented systemd units: they run the patrol for the instance's stack, treat exit 3 (a node
quarantined) as success, and pass `systemd-analyze verify` (with the install path stubbed)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

FILES = Path(__file__).resolve().parents[2] / "playbooks" / "files"


def unit(name: str) -> configparser.ConfigParser:
    p = configparser.ConfigParser(strict=False, interpolation=None)
    p.optionxform = str  # type: ignore[assignment,method-assign]
    p.read(FILES / name)
    return p


def test_the_service_runs_the_patrol_of_its_instance_stack():
    svc = unit("gpufleet-patrol@.service")
    assert svc["Service"]["ExecStart"].endswith("gpufleet patrol -s %i")
    assert svc["Service"]["SuccessExitStatus"] == "3" and svc["Service"]["Type"] == "oneshot"
    timer = unit("gpufleet-patrol@.timer")
    assert timer["Timer"]["OnCalendar"] == "hourly" and timer["Install"]["WantedBy"] == "timers.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verifies_the_units(tmp_path):
    for suffix in ("service", "timer"):
        text = (FILES / f"gpufleet-patrol@.{suffix}").read_text()
        (tmp_path / f"gpufleet-patrol@ci.{suffix}").write_text(
            text.replace("/srv/gpufleet/.venv/bin/gpufleet", "/bin/true"))
    run = subprocess.run(["systemd-analyze", "verify", "gpufleet-patrol@ci.timer", "gpufleet-patrol@ci.service"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    problems = [line for line in (run.stdout + run.stderr).splitlines() if "gpufleet-patrol" in line]
    assert run.returncode == 0 and not problems, run.stdout + run.stderr
