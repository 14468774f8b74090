"""Shared test helpers: the project root, the nodeadm schema and the program captured under mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from gpufleet.cloud.capture import Capture
from gpufleet.cloud.snapshot import capture_for_snapshot
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
