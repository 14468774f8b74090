"""ansible-lint (production profile, offline) and ansible-playbook --syntax-check on site.yml and remediate.yml."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_NOCOLOR="1",
                NO_COLOR="1", ANSIBLE_ROLES_PATH=str(ROOT / "playbooks" / "roles"))


@pytest.mark.parametrize("playbook", ["site.yml", "remediate.yml"])
def test_ansible_lint_production_profile(playbook):
    lint = shutil.which("ansible-lint", path=str(BIN)) or shutil.which("ansible-lint")
    if lint is None:
        pytest.skip("ansible-lint is not installed (pip install ansible-lint; see the test extra)")
    proc = subprocess.run([lint, "--offline", "--profile", "production", "--nocolor", f"playbooks/{playbook}"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("playbook", ["site.yml", "remediate.yml"])
def test_site_syntax_check(playbook):
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", f"playbooks/{playbook}"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
