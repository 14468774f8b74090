"""Real Prometheus tools for the ops tests: Debian's `prometheus` (promtool) and
`prometheus-alertmanager`, installed here when missing and root; otherwise those tests skip."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PACKAGES = {"promtool": "prometheus", "prometheus": "prometheus", "prometheus-alertmanager": "prometheus-alertmanager"}


def ensure_tool(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    if os.geteuid() != 0:
        pytest.skip(f"{name} is not installed and installing {PACKAGES[name]} needs root")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run([*apt, "update"], check=False, env=env, capture_output=True, timeout=600)
    subprocess.run([*apt, "install", "-y", "--no-install-recommends", PACKAGES[name]], check=True, env=env,
                   capture_output=True, timeout=900)
    found = shutil.which(name)
    assert found, f"{PACKAGES[name]} installed but {name} is not on PATH"
    return found


@pytest.fixture(scope="session")
def promtool() -> str:
    return ensure_tool("promtool")


@pytest.fixture
def serve_args() -> list[str]:
    """Extra `ops serve` options for tests.ops.serving's `served`; a test module overrides it."""
    return []


@pytest.fixture
def serve_env() -> dict[str, str]:
    """Extra environment for `served`'s `ops serve` process; a test module overrides it."""
    return {}
