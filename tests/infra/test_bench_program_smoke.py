"""The program benchmark runs end to end at a small size (the real sizes are `python bench/bench_program.py`)."""

from __future__ import annotations

import importlib.util

from infra.spec import PROJECT_ROOT


def test_bench_runs_at_small_size():
    spec = importlib.util.spec_from_file_location("bench_program", PROJECT_ROOT / "bench" / "bench_program.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run(sizes=(32,), stack="dev")
    assert [r["label"] for r in rows] == ["baseline dev", "dev x32"]
    assert rows[1]["instances"] == 4 and rows[1]["seconds"] > 0 and rows[1]["peak_mib"] > 0
