"""The program benchmark runs end to end at a small size (the real sizes are `python bench/bench_program.py`),
and its timed run is never traced (tracemalloc slows the program several times over)."""

from __future__ import annotations

import importlib.util
import tracemalloc
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # the Pulumi program four times over, ~40 s


def _bench():
    spec = importlib.util.spec_from_file_location("bench_program", REPO_ROOT / "bench" / "bench_program.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bench_runs_at_small_size():
    # dev is a Slurm stack: 4 GPU nodes, the head node and the storage base check's 4 clients
    rows = _bench().run(sizes=(32,), stack="dev")
    assert [r["label"] for r in rows] == ["baseline dev", "dev x32"]
    assert rows[1]["instances"] == 4 + 1 + 4 and rows[1]["seconds"] > 0 and rows[1]["peak_mib"] > 0


def test_time_and_memory_come_from_separate_runs(monkeypatch):
    bench = _bench()
    traced: list[bool] = []
    real = bench.capture_program

    def spy(*args, **kwargs):
        traced.append(tracemalloc.is_tracing())
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "capture_program", spy)
    row = bench.measure("dev")
    assert traced == [False, True], "the timed run must be untraced, the memory run traced"
    assert row["peak_mib"] > 0 and not tracemalloc.is_tracing()
