"""Golden files: compared byte for byte; rewritten only with --update-golden or
GPUFLEET_UPDATE_GOLDEN=1, so a change in output is always a reviewed diff.

A rewrite fails the test that made it (naming the file and showing the diff): a run with the
variable set, by mistake or left in a CI environment, can never go green by rewriting its goldens.
Rerun without it once the diff is reviewed."""

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
    def __init__(self, update: bool, root: Path = GOLDEN) -> None:
        self.update, self.root = update, root

    def check(self, name: str, actual: str) -> None:
        path = self.root / name
        expected = path.read_text(encoding="utf-8") if path.exists() else None
        if actual == expected:
            return
        diff = "".join(difflib.unified_diff((expected or "").splitlines(True), actual.splitlines(True),
                                            f"golden/{name}", "rendered", n=2))
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual, encoding="utf-8")
            pytest.fail(f"REWROTE golden/{name} (--update-golden or GPUFLEET_UPDATE_GOLDEN=1): review the diff and "
                        f"rerun without it; a run that rewrites a golden file never passes:\n{diff}", pytrace=False)
        if expected is None:
            pytest.fail(f"no golden file {path}; create it with --update-golden and review it")
        pytest.fail(f"output differs from golden/{name} (rerun with --update-golden if intended):\n{diff}",
                    pytrace=False)


@pytest.fixture
def golden(request) -> Golden:
    update = bool(request.config.getoption("--update-golden", default=False)) or \
        os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1"
    return Golden(update)
