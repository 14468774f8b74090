"""Role `workloads` for real (ansible-playbook on localhost, into a temporary folder): it installs
the project's images/workloads/ files, read from the project beside the playbooks (no copy of
them in the role to drift), a --check --diff run writes nothing, a second run changes nothing,
and a project without train_smoke.py is refused before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

PLAY = """---
- name: Install the workload scripts
  hosts: localhost
  gather_facts: false
  roles:
    - role: workloads
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role installs root-owned files (run as root, as CI)")
pytestmark = [pytestmark, pytest.mark.slow]  # real ansible-playbook runs


def _project(tmp_path: Path, images: Path) -> Path:
    """A project as gpufleet lays one out: playbooks/ beside images/."""
    (tmp_path / "project/playbooks").mkdir(parents=True)
    (tmp_path / "project/images").symlink_to(images)
    (tmp_path / "project/playbooks/play.yml").write_text(PLAY)
    return tmp_path / "project/playbooks/play.yml"


def _run(play: Path, dest: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "playbooks/roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(play.parents[2] / "ansible-tmp"))
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
                           "-e", json.dumps({"workloads_dir": str(dest), "ansible_python_interpreter": sys.executable}),
                           *extra], env=env, capture_output=True, text=True, timeout=300)


def _changed(proc: subprocess.CompletedProcess) -> int:
    recap = [line for line in proc.stdout.splitlines() if line.startswith("localhost")][-1]
    return int(recap.split("changed=")[1].split()[0])


def test_installs_the_project_scripts_idempotently_and_check_mode_writes_nothing(tmp_path):
    play, dest = _project(tmp_path, ROOT / "images"), tmp_path / "node/opt/gpufleet/workloads"
    check = _run(play, dest, "--check", "--diff")
    assert check.returncode == 0, check.stdout[-3000:]
    assert _changed(check) > 0 and not dest.parent.exists()

    first = _run(play, dest)
    assert first.returncode == 0, first.stdout[-3000:]
    shipped = sorted(p.name for p in (ROOT / "images/workloads").iterdir() if p.is_file())
    assert "train_smoke.py" in shipped and sorted(p.name for p in dest.iterdir()) == shipped
    for name in shipped:
        assert (dest / name).read_bytes() == (ROOT / "images/workloads" / name).read_bytes()
        assert oct((dest / name).stat().st_mode & 0o777) == "0o644"

    second = _run(play, dest)
    assert second.returncode == 0 and _changed(second) == 0, second.stdout[-3000:]
    again = _run(play, dest, "--check", "--diff")
    assert again.returncode == 0 and _changed(again) == 0


def test_a_project_without_the_smoke_script_is_refused(tmp_path):
    (tmp_path / "images/workloads").mkdir(parents=True)
    (tmp_path / "images/workloads/other.py").write_text("print('not the smoke job')\n")
    play, dest = _project(tmp_path, tmp_path / "images"), tmp_path / "node/workloads"
    proc = _run(play, dest)
    assert proc.returncode != 0 and "train_smoke.py is not in" in proc.stdout
    assert not dest.exists()
