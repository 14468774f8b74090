"""The published failure mixes are the sources' figures, every class maps to kinds the simulator
renders (or to the latent kind, counted apart), and a draw is seeded and follows the counts."""

from __future__ import annotations

from collections import Counter

import pytest

from gpufleet.errors import ConfigError
from gpufleet.sim.faults import EFFECTS, LATENT
from gpufleet.sim.field_mix import CRUSOE, LLAMA3, MIXES, draw, get_mix

# Llama 3 paper, table 5 (419 unexpected interruptions), as /work/shared/reference/field-data.md quotes it
LLAMA3_TABLE = {"faulty GPU": 148, "GPU HBM3 memory": 72, "software bug": 54, "network switch/cable": 35,
                "host maintenance": 32, "GPU SRAM memory": 19, "GPU system processor": 17, "NIC": 7,
                "NCCL watchdog timeouts": 7, "silent data corruption": 6, "GPU thermal interface + sensor": 6}


def test_llama3_counts_are_table_5_and_sum_to_419():
    counts = {c.name: c.count for c in LLAMA3.classes}
    assert {k: counts[k] for k in LLAMA3_TABLE} == LLAMA3_TABLE
    assert sum(counts.values()) == 419


def test_crusoe_shares_sum_to_the_whole():
    assert sum(c.count for c in CRUSOE.classes) == pytest.approx(100.0)
    assert {c.name: c.count for c in CRUSOE.classes}["GPU host replacement"] == 41.5


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_every_class_maps_to_rendered_kinds_and_latent_ones_are_apart(mix):
    for c in get_mix(mix).classes:
        assert c.kinds and set(c.kinds) <= set(EFFECTS), c
        assert c.visible == (not set(c.kinds) & LATENT)
        assert all(EFFECTS[k].stage != "latent" for k in c.kinds) or not c.visible
    assert get_mix(mix).source


def test_silent_data_corruption_is_invisible_at_admission():
    sdc = next(c for c in LLAMA3.classes if c.name == "silent data corruption")
    assert not sdc.visible and EFFECTS["latent"].final == "admitted"


def test_draw_is_seeded_and_follows_the_counts():
    assert draw(LLAMA3, 50, 3) == draw(LLAMA3, 50, 3) != draw(LLAMA3, 50, 4)
    big = Counter(name for name, _ in draw(LLAMA3, 41900, 1))
    assert abs(big["faulty GPU"] / 41900 - 148 / 419) < 0.01
    assert abs(big["software bug"] / 41900 - 54 / 419) < 0.01
    assert all(kind in get_mix("llama3").classes[[c.name for c in LLAMA3.classes].index(name)].kinds
               for name, kind in draw(LLAMA3, 200, 2))


def test_an_unknown_mix_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigError, match="llama3"):
        get_mix("nope")
