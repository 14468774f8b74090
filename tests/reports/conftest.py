"""Golden files: compared byte for byte; rewritten only with --update-golden or
GPUFLEET_UPDATE_GOLDEN=1, so a change in output is always a reviewed diff."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "golden"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/fixtures/reports/golden/* from the renderers' current output")


class Golden:
    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, name: str, actual: str) -> None:
        path = GOLDEN / name
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual, encoding="utf-8")
            return
        if not path.exists():
            pytest.fail(f"no golden file {path}; create it with --update-golden and review it")
        expected = path.read_text(encoding="utf-8")
        if actual != expected:
            diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                                f"golden/{name}", "rendered", n=2))
            pytest.fail(f"output differs from golden/{name} (rerun with --update-golden if intended):\n{diff}",
                        pytrace=False)


@pytest.fixture
def golden(request) -> Golden:
    update = bool(request.config.getoption("--update-golden", default=False)) or \
        os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1"
    return Golden(update)
