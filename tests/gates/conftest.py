"""Shared paths: the real captures (../shared/fixtures/real, beside the repo) and our own fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / ".." / "shared" / "fixtures" / "real"
OWN = REPO / "tests" / "fixtures" / "gates"


@pytest.fixture
def real():
    if not REAL.is_dir():
        pytest.skip(f"real captures not present at {REAL}")

    def read(name: str) -> str:
        return (REAL / name).read_text(encoding="utf-8")

    return read


@pytest.fixture
def own():
    def read(name: str) -> str:
        return (OWN / name).read_text(encoding="utf-8")

    return read
