"""Reading Slurm's node output and the gpufleet comment, pure (the live readers are in test_slurm_real.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import PoolError
from gpufleet.pool.protocol import NodeState
from gpufleet.pool.slurm.nodes import Comment, parse_comment, parse_json, parse_text, pool_node, released_failures

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_real_23_02_grouped_sinfo_json():
    nodes = parse_json((FIXTURES / "sinfo_N_json__slurm23.02.5_localhost_nogpu__rivosinc_exporter.json").read_text())
    assert list(nodes) == ["localhost"]
    n = nodes["localhost"]
    assert n.busy and not n.drained and not n.down and n.partitions == ("debug",) and n.reason == ""
    assert pool_node(n) is None  # allocated, but gpufleet never touched it: not this pool's to report


def test_scontrol_json_from_23_02_keeps_flags_in_the_state_list():
    doc = {"nodes": [{"name": "a-b0003-n00015", "state": ["IDLE", "DRAIN"], "reason": "gpufleet quarantine xid-79: off the bus",
                      "comment": "gpufleet f=1", "partitions": ["train"], "features": ["block0003"]}]}
    n = parse_json(json.dumps(doc))["a-b0003-n00015"]
    got = pool_node(n)
    assert got is not None and got.state is NodeState.QUARANTINED and got.block == 3
    assert (got.reason_code, got.reason, got.failures, got.partition) == ("xid-79", "off the bus", 1, "train")


def test_text_with_spaces_in_reason_and_comment():
    line = ("NodeName=x-b0000-n00001 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 AvailableFeatures=block0000 "
            "ActiveFeatures=block0000 Gres=gpu:h100:8 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=train,sim  "
            "ExtSensorsTemp=n/s Reason=gpufleet blacklist nvlink-down: NVLink 2 down [root@2026-11-30T23:31:30] "
            'Comment="gpufleet f=2 | PASS batch=1"')
    n = parse_text(line)["x-b0000-n00001"]
    assert n.reason == "gpufleet blacklist nvlink-down: NVLink 2 down"  # Slurm's [user@time] suffix dropped
    assert n.comment == "gpufleet f=2 | PASS batch=1" and n.partitions == ("train", "sim")
    got = pool_node(n)
    assert got is not None and got.state is NodeState.BLACKLISTED and got.failures == 2


def test_foreign_drain_and_down_read_as_quarantined_and_released_is_absent():
    base = {"name": "n1", "partitions": ["train"], "features": "block0000"}
    drained = parse_json(json.dumps({"nodes": [{**base, "state": "idle", "state_flags": ["DRAIN"],
                                                "reason": "Kill task failed", "comment": "gpufleet f=0 d=sha256:ab"}]}))["n1"]
    assert pool_node(drained).state is NodeState.QUARANTINED and pool_node(drained).reason_code == "slurm-drain"  # type: ignore[union-attr]
    down = parse_json(json.dumps({"nodes": [{**base, "state": "down", "reason": "Not responding", "comment": ""}]}))["n1"]
    assert pool_node(down).reason_code == "slurm-down"  # type: ignore[union-attr]
    released = parse_json(json.dumps({"nodes": [{**base, "state": "idle", "state_flags": ["DRAIN"],
                                                 "reason": "gpufleet: released", "comment": "gpufleet f=1"}]}))["n1"]
    assert pool_node(released) is None and released_failures(released) == 1
    gating = parse_json(json.dumps({"nodes": [{**base, "state": "idle", "reason": "", "comment": "gpufleet f=0"}]}))["n1"]
    assert pool_node(gating).state is NodeState.PENDING  # type: ignore[union-attr]  # resumed for a gate run


def test_comment_round_trip_and_foreign_comments():
    c = Comment(failures=3, digest="sha256:" + "0" * 64, summary="PASS batch=2 block=7 busbw=480.0GB/s")
    assert parse_comment(c.render()) == c
    assert parse_comment('"' + Comment(1).render() + '"') is None  # quotes are removed by the reader, not here
    assert parse_comment("maintenance by ops") is None and parse_comment("") is None
    assert parse_comment("gpufleet f=x").failures == 0  # type: ignore[union-attr]


def test_garbage_json_is_a_pool_error():
    with pytest.raises(PoolError, match="does not parse"):
        parse_json("{")
    with pytest.raises(PoolError, match="neither"):
        parse_json('{"meta": {}}')
