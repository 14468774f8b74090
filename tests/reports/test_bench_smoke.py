"""bench_reports at a small size: it runs, prints its figures and keeps the budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_reports.py"


def test_bench_reports_small():
    run = subprocess.run([sys.executable, str(BENCH), "--nodes", "40", "--small", "4", "--budget", "60"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "40 nodes (800 JUnit cases)" in run.stdout and "ratio 40 / 4 nodes" in run.stdout
    assert "within the budget" in run.stdout
