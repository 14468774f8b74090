"""ansible-lint (production profile, offline) and ansible-playbook --syntax-check on every playbook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # ansible-lint and ansible-playbook --syntax-check on every playbook, 2-30 s each
BIN = Path(sys.executable).parent
# every playbook in playbooks/ (requirements.yml lists collections, it is no playbook)
PLAYBOOKS = sorted(p.name for p in (ROOT / "playbooks").glob("*.yml") if p.name != "requirements.yml")


def test_the_known_playbooks_are_linted():
    assert {"site.yml", "preflight.yml", "remediate.yml"} <= set(PLAYBOOKS)


def _env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_NOCOLOR="1",
                NO_COLOR="1", ANSIBLE_ROLES_PATH=str(ROOT / "playbooks" / "roles"))


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_ansible_lint_production_profile(playbook):
    lint = shutil.which("ansible-lint", path=str(BIN)) or shutil.which("ansible-lint")
    if lint is None:
        pytest.skip("ansible-lint is not installed (pip install ansible-lint; see the test extra)")
    proc = subprocess.run([lint, "--offline", "--profile", "production", "--nocolor", f"playbooks/{playbook}"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_site_syntax_check(playbook):
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", f"playbooks/{playbook}"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
