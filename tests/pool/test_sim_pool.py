"""The simulator's pool file: atomic, shared between processes, refused when damaged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.errors import PoolError
from gpufleet.pool.protocol import NodeState, PendingNode
from gpufleet.pool.sim import SimPool

from .contract import record
from .fakes import RecordingLauncher

NODES = [PendingNode(slot=f"s-b0000-n{i:05d}", block=0, partition="train") for i in range(3)]


def test_the_file_is_plain_sorted_json_and_survives_a_new_reader(tmp_path: Path):
    path = tmp_path / "state" / "pool.json"
    pool = SimPool(path, RecordingLauncher())
    pool.register_pending(NODES)
    pool.admit(NODES[0].slot, record(NODES[0]))
    text = path.read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    again = SimPool(path, None).state()
    assert again.get(NODES[0].slot).state is NodeState.ADMITTED  # type: ignore[union-attr]


def test_a_change_by_another_process_is_seen(tmp_path: Path):
    path = tmp_path / "pool.json"
    pool = SimPool(path, None)
    pool.register_pending(NODES)
    assert pool.state().get(NODES[1].slot).state is NodeState.PENDING  # type: ignore[union-attr]
    code = ("import sys; from pathlib import Path; from gpufleet.pool.sim import SimPool; "
            f"SimPool(Path({str(path)!r}), None).quarantine({NODES[1].slot!r}, 'xid-79', 'from another process')")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
    got = pool.state().get(NODES[1].slot)
    assert got is not None and got.state is NodeState.QUARANTINED and got.reason == "from another process"
    assert pool.quarantine(NODES[1].slot, "xid-79", "from another process").failures == 1  # no double count


def test_a_damaged_file_is_a_pool_error_naming_it(tmp_path: Path):
    path = tmp_path / "pool.json"
    path.write_text('{"nodes": {')
    with pytest.raises(PoolError, match="pool.json is not valid JSON"):
        SimPool(path, None).state()
    path.write_text('{"version": 99, "nodes": {}}')
    with pytest.raises(PoolError, match="not a version-1"):
        SimPool(path, None).register_pending(NODES)
    assert path.read_text() == '{"version": 99, "nodes": {}}'  # nothing written over it


def test_a_status_only_pool_has_no_launcher(tmp_path: Path):
    with pytest.raises(PoolError, match="without a launcher"):
        SimPool(tmp_path / "pool.json", None).launcher()
    fake = RecordingLauncher()
    assert SimPool(tmp_path / "pool.json", fake).launcher() is fake


def test_admit_many_is_one_write_and_all_or_nothing(tmp_path: Path):
    path = tmp_path / "pool.json"
    pool = SimPool(path, None)
    pool.register_pending(NODES)
    before = path.read_text()
    with pytest.raises(PoolError, match=f"{NODES[2].slot}.*another|{NODES[2].slot}.*for slot"):
        pool.admit_many([(NODES[0].slot, record(NODES[0])), (NODES[2].slot, record(NODES[1]))])
    assert path.read_text() == before  # the valid first admission was not applied either
    got = pool.admit_many([(n.slot, record(n)) for n in NODES])
    assert [n.state for n in got] == [NodeState.ADMITTED] * 3
    assert len(SimPool(path, None).state().by_state(NodeState.ADMITTED)) == 3
