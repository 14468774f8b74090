"""bench/bench_field.py counts what it claims: one seeded rollout of the 1,000-GPU stack under a
mix, every injected fault accounted for exactly once, latent ones entering the pool, the
seeded truth (not the gates' words) deciding caught and missed."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.sim.field_mix import draw, get_mix

REPO = Path(__file__).resolve().parents[2]


def bench():
    spec = importlib.util.spec_from_file_location("bench_field", REPO / "bench" / "bench_field.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules.setdefault("bench_field", module)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.slow
def test_one_seed_accounts_for_every_injected_fault(tmp_path):
    b = bench()
    result, _ = b.run_mix("llama3", [3], 0.06, tmp_path, None)
    drawn = Counter(name for name, _ in draw(get_mix("llama3"), round(0.06 * 125), 3))
    per = result["per"]
    assert {name: c["injected"] for name, c in per.items()} == dict(drawn)
    for name, c in per.items():
        assert c["injected"] == c["caught"] + c["missed"] + c["not-reached"], (name, c)
    latent = {c.name for c in get_mix("llama3").classes if not c.visible}
    assert all(per[n]["missed"] == per[n]["injected"] for n in latent if n in per)  # invisible: in the pool
    assert result["healthy"] > 100 and result["healthy_q"] == 0
