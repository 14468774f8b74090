from __future__ import annotations

from pathlib import Path

import pytest

from tests.daytwo.fleet import copy_project, rolled_out


@pytest.fixture(scope="session")
def fleet_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rolled_out(tmp_path_factory.mktemp("daytwo-fleet"))


@pytest.fixture
def fleet(fleet_base: Path, tmp_path: Path) -> Path:
    """A fresh copy of the rolled-out crash40 project for one test."""
    return copy_project(fleet_base, tmp_path / "project")
