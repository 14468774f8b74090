"""The benchmark's functions at a tiny size (no timing asserts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_gates.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gates", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_gate_folder_tiny(tmp_path):
    b = _bench()
    assert len(b.make_bundles(tmp_path, 6, fault_rate=0.5)) == 6
    read_s, decide_s, n, q = b.gate_folder(tmp_path)
    assert n == 6 and read_s >= 0 and decide_s >= 0 and 0 <= q <= 6


def test_bench_serial_vs_parallel_tiny(tmp_path):
    b = _bench()
    b.make_bundles(tmp_path, 70, fault_rate=0.2)  # over the parallel threshold
    f = b.serial_vs_parallel(tmp_path, workers=2, repeat=1)  # asserts identical records itself
    assert f["nodes"] == 70 and f["serial"] > 0 and f["parallel"] > 0 and f["speedup"] > 0


def test_bench_isolation_tiny():
    f = _bench().isolation_vs_all_pairs(40, 2, 1)
    assert f["naive_runs"] == 780 and f["runs"] < f["naive_runs"] and f["rounds"] < f["naive_rounds"]


def test_bench_main_runs(capsys):
    assert _bench().main(["--nodes", "30"]) == 0
    assert "isolation n=30" in capsys.readouterr().out
