"""Fixture paths: the real captures copied into the repository and our own failure-shape fixtures.

Why inside the repository: a clone alone must run every real-output test (tests/fixtures/real/
SOURCES.md says where each file came from). A missing file fails the test that reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "tests" / "fixtures" / "real"
OWN = REPO / "tests" / "fixtures" / "gates"


def read_real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


@pytest.fixture
def real():
    return read_real


@pytest.fixture
def own():
    def read(name: str) -> str:
        return (OWN / name).read_text(encoding="utf-8")

    return read
