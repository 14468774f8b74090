"""The simulated pool names the work on its busy nodes (the scheduler's `work` map in pool.json),
keeps that map through its own writes, and refuses one that is not slot -> name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.durable import write_atomic
from gpufleet.errors import PoolError
from gpufleet.pool.protocol import Evicting, HasHolders, Holder, NodeState, PendingNode
from gpufleet.pool.sim import SimPool

from .contract import record
from .fakes import RecordingLauncher

NODES = [PendingNode(slot=f"s-b0000-n{i:05d}", block=0, partition="train") for i in range(3)]
JOB = "train/job/7 llm pretrain | step 3 (alice)"


def _place(path: Path, slot: str, work: str | None) -> None:
    """What the simulated scheduler does when a job lands: the busy flag, and its name if it has one."""
    doc = json.loads(path.read_text())
    doc["nodes"][slot]["busy"] = True
    if work is not None:
        doc.setdefault("work", {})[slot] = work
    write_atomic(path, json.dumps(doc))


def _admitted(tmp_path: Path) -> tuple[SimPool, Path]:
    path = tmp_path / "pool.json"
    pool = SimPool(path, RecordingLauncher())
    pool.register_pending(NODES)
    pool.admit_many([(n.slot, record(n)) for n in NODES])
    return pool, path


def test_busy_nodes_name_their_work_and_idle_or_unnamed_ones_do_not(tmp_path: Path):
    pool, path = _admitted(tmp_path)
    _place(path, NODES[0].slot, JOB)
    _place(path, NODES[1].slot, None)
    slots = [n.slot for n in NODES]
    assert pool.holders(slots) == [Holder(NODES[0].slot, JOB)]
    assert isinstance(pool, HasHolders) and not isinstance(pool, Evicting)


def test_the_work_map_survives_the_pools_own_writes_and_a_finished_job_holds_nothing(tmp_path: Path):
    pool, path = _admitted(tmp_path)
    _place(path, NODES[0].slot, JOB)
    pool.quarantine(NODES[2].slot, "xid-48", "double-bit ECC")  # a write of the whole file
    assert pool.state().get(NODES[2].slot).state is NodeState.QUARANTINED  # type: ignore[union-attr]
    assert json.loads(path.read_text())["work"] == {NODES[0].slot: JOB}
    assert SimPool(path, None).holders([NODES[0].slot]) == [Holder(NODES[0].slot, JOB)]  # a new reader too
    doc = json.loads(path.read_text())
    doc["nodes"][NODES[0].slot]["busy"] = False  # the job ended; its name left behind names nothing
    write_atomic(path, json.dumps(doc))
    assert pool.holders([NODES[0].slot]) == []


def test_a_pool_file_without_work_is_written_as_before(tmp_path: Path):
    _pool, path = _admitted(tmp_path)
    assert "work" not in json.loads(path.read_text())


def test_a_work_map_that_is_not_slot_to_name_is_refused(tmp_path: Path):
    pool, path = _admitted(tmp_path)
    doc = json.loads(path.read_text())
    doc["work"] = {NODES[0].slot: 7}
    write_atomic(path, json.dumps(doc))
    with pytest.raises(PoolError, match="`work` must map slots to the names"):
        pool.holders([NODES[0].slot])
