"""Shared test helpers: the project root, the nodeadm schema and the program captured under mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from gpufleet.program.capture import Capture
from gpufleet.program.snapshot import capture_for_snapshot
from gpufleet.spec import available_stacks

# the rolled-out day-two fleet, shared by tests/daytwo and tests/ops
pytest_plugins = ["tests.daytwo.fleet"]

PROJECT_ROOT = Path(__file__).resolve().parents[1]


STACKS = available_stacks()
NODEADM_CRD = PROJECT_ROOT / "tests" / "fixtures" / "schemas" / "nodeadm" / "node.eks.aws_nodeconfigs.yaml"
_captures: dict[str, Capture] = {}


def _full_capture(stack: str) -> Capture:
    """Every batch deployed on a fresh stack; cached so each stack's program runs once per session."""
    if stack not in _captures:
        _captures[stack] = capture_for_snapshot(stack)
    return _captures[stack]


# The fast tier, `pytest -m "not slow"` (README "Tests"): a test is slow, whatever its own marks,
# when it needs root (chroots, network namespaces, apt) or a fixture that brings up a real tool or
# system: a Debian or AL2023 root, the Ansible collections (the ansible wheel), a real Slurm, an sshd,
# Prometheus, Chromium. Tests slow for their own work carry `pytest.mark.slow` themselves.
SLOW_FIXTURES = frozenset({
    "base_rootfs", "dnf_layer", "collections_dir",  # tests/configure/host_fixtures.py
    "slurm_cluster", "slurm_project", "sshd",  # tests/pool, tests/daytwo: a real slurmctld and slurmd, an sshd
    "promtool", "prometheus_url",  # tests/ops: Debian's prometheus
    "browser",  # tests/reports/test_html.py: Chromium renders the reports
})


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: the mark must be on the item by then
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and (
                item.get_closest_marker("requires_root") is not None
                or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def full_capture() -> Callable[[str], Capture]:
    return _full_capture


@pytest.fixture(params=STACKS)
def cap(request) -> Capture:
    return _full_capture(request.param)


@pytest.fixture(scope="session")
def nodeadm_schema() -> dict:
    import yaml

    crd = yaml.safe_load(NODEADM_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    return version["schema"]["openAPIV3Schema"]
