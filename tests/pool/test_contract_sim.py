"""The pool contract against the simulator's file-backed pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.pool.protocol import PendingNode
from gpufleet.pool.sim import SimPool

from . import contract
from .fakes import RecordingLauncher

SLOTS = [PendingNode(slot=f"ct-b{i // 2:04d}-n{i:05d}", block=i // 2, partition="train" if i < 4 else "debug",
                     instance_id=f"i-{i:017x}") for i in range(6)]


@pytest.fixture
def make_subject(tmp_path: Path) -> contract.SubjectFactory:
    count = iter(range(1000))

    def make(failures_before_blacklist: int) -> contract.Subject:
        pool = SimPool(tmp_path / f"pool{next(count)}" / "pool.json", RecordingLauncher(),
                       failures_before_blacklist=failures_before_blacklist, slots=[n.slot for n in SLOTS],
                       partitions=["train", "debug"])
        return contract.Subject(pool=pool, nodes=SLOTS, missing_partition="inference")

    return make


@pytest.mark.parametrize("check", contract.CHECKS, ids=contract.check_id)
def test_contract(check, make_subject):
    check(make_subject)
