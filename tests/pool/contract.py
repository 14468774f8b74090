"""The pool contract: behaviour every Pool adapter (sim, Slurm, Kubernetes) must show.

HOW TO USE IT FROM AN ADAPTER'S TEST FILE
    from . import contract          # tests/pool is a package (it has __init__.py)

    @pytest.fixture
    def make_subject() -> contract.SubjectFactory: ...   # see below

    @pytest.mark.parametrize("check", contract.CHECKS, ids=contract.check_id)
    def test_contract(check, make_subject):
        check(make_subject)

THE FACTORY: `make_subject(failures_before_blacklist: int) -> Subject`, called once per check.
It returns a FRESH pool (nothing registered by gpufleet yet, no failures remembered) and:
- `nodes`: at least 4 `PendingNode`s the backend knows (Slurm: in slurm.conf; Kubernetes: Node
  objects exist), with `block` set, nodes[0] and nodes[1] in block 0, and `partition` set to a
  partition the pool has;
- `missing_partition`: a partition name the pool does NOT have;
- `down`: a callable returning the same kind of pool whose backend is unreachable (slurmctld
  stopped or a dead port, an API server that refuses), or None where the backend cannot be down
  (the simulator's file).
Each check is a plain function `check(make_subject) -> None` that raises AssertionError on a
broken promise. The semantics are those of `infra/gpufleet/pool/protocol.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Callable, Sequence

import pytest

from gpufleet.errors import PoolError
from gpufleet.gates.admission import AdmissionRecord, BusbwFigures
from gpufleet.gates.verdict import Action, CheckResult, Verdict
from gpufleet.pool.protocol import NodeState, PendingNode, Pool, record_digest

UNKNOWN_SLOT = "no-such-slot-b9999-n99999"


@dataclass
class Subject:
    pool: Pool
    nodes: Sequence[PendingNode]
    missing_partition: str
    down: Callable[[], Pool] | None = None


SubjectFactory = Callable[[int], Subject]


def record(node: PendingNode | str, action: Action = Action.ADMIT, busbw: float = 361.5) -> AdmissionRecord:
    """A minimal, valid admission record for a slot (what the gates write)."""
    slot = node if isinstance(node, str) else node.slot
    block = None if isinstance(node, str) else node.block
    verdict = Verdict.PASS if action is Action.ADMIT else Verdict.QUARANTINE
    check = CheckResult(check_id="nccl.intra_node", severity="Q", measured=f"{busbw} GB/s", expected=">= 300 GB/s",
                        verdict=verdict, reason_code=None if verdict is Verdict.PASS else "busbw-low",
                        research_ref="gates-research.md (b)")
    return AdmissionRecord(slot=slot, instance_id=f"i-{abs(hash(slot)) % 16**12:012x}", instance_type="p5.48xlarge",
                           stack="contract", batch=1, block=block, bom_digest="sha256:" + "ab" * 32, verdict=verdict,
                           action=action, checks=(check,), busbw=BusbwFigures(intra_node_gbs=busbw),
                           decided_at=datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc))


def _state_of(pool: Pool, slot: str) -> NodeState | None:
    node = pool.state().get(slot)
    return node.state if node else None


def _refused(call: Callable[[], object], slot: str | None, *words: str) -> PoolError:
    with pytest.raises(PoolError) as err:
        call()
    text = str(err.value).lower()
    if slot is not None:
        assert slot.lower() in text, f"the error does not name the node {slot}: {err.value}"
    for w in words:
        assert w.lower() in text, f"the error does not say {w!r}: {err.value}"
    return err.value


# --- the checks -----------------------------------------------------------------------------

def registered_nodes_are_pending_with_block_and_partition(make: SubjectFactory) -> None:
    s = make(2)
    s.pool.register_pending(s.nodes[:3])
    state = s.pool.state()
    for n in s.nodes[:3]:
        got = state.get(n.slot)
        assert got is not None and got.state is NodeState.PENDING, got
        assert got.block == n.block and got.partition == n.partition, got
        assert got.failures == 0 and got.record_digest is None
    assert {n.slot for n in state.by_state(NodeState.ADMITTED)} & {n.slot for n in s.nodes[:3]} == set()
    s.pool.register_pending(s.nodes[:3])  # idempotent
    assert s.pool.state().get(s.nodes[0].slot) == state.get(s.nodes[0].slot)


def admit_attaches_the_record_and_is_idempotent(make: SubjectFactory) -> None:
    s = make(2)
    n = s.nodes[0]
    s.pool.register_pending([n])
    rec = record(n)
    got = s.pool.admit(n.slot, rec)
    assert got.state is NodeState.ADMITTED and got.record_digest == record_digest(rec)
    again = s.pool.admit(n.slot, rec)
    assert again == got
    seen = s.pool.state().get(n.slot)
    assert seen is not None and seen.state is NodeState.ADMITTED and seen.record_digest == record_digest(rec)
    assert seen.block == n.block and seen.partition == n.partition


def admit_refuses_a_record_for_another_slot_or_not_admit(make: SubjectFactory) -> None:
    s = make(2)
    a, b = s.nodes[0], s.nodes[1]
    s.pool.register_pending([a, b])
    _refused(lambda: s.pool.admit(a.slot, record(b)), a.slot, b.slot)
    _refused(lambda: s.pool.admit(a.slot, record(a, Action.QUARANTINE)), a.slot, "quarantine")
    assert _state_of(s.pool, a.slot) is NodeState.PENDING  # nothing half-applied
    assert s.pool.admit(a.slot, record(a)).state is NodeState.ADMITTED  # and retrying with the right record works


def unknown_nodes_are_errors_never_skipped(make: SubjectFactory) -> None:
    s = make(2)
    _refused(lambda: s.pool.admit(UNKNOWN_SLOT, record(UNKNOWN_SLOT)), UNKNOWN_SLOT)
    _refused(lambda: s.pool.quarantine(UNKNOWN_SLOT, "xid-79", "GPU fell off the bus"), UNKNOWN_SLOT)
    _refused(lambda: s.pool.blacklist(UNKNOWN_SLOT, "bad slot"), UNKNOWN_SLOT)
    _refused(lambda: s.pool.clear(UNKNOWN_SLOT), UNKNOWN_SLOT)
    _refused(lambda: s.pool.release(UNKNOWN_SLOT), UNKNOWN_SLOT)
    ghost = PendingNode(slot=UNKNOWN_SLOT, block=0, partition=s.nodes[0].partition)
    _refused(lambda: s.pool.register_pending([s.nodes[0], ghost]), UNKNOWN_SLOT)
    assert s.pool.state().get(UNKNOWN_SLOT) is None


def a_partition_the_pool_lacks_refuses_the_whole_call(make: SubjectFactory) -> None:
    s = make(2)
    good, bad = s.nodes[0], replace(s.nodes[1], partition=s.missing_partition)
    before = s.pool.state().get(good.slot)
    _refused(lambda: s.pool.register_pending([good, bad]), bad.slot, s.missing_partition)
    assert s.pool.state().get(good.slot) == before  # nothing half-applied
    s.pool.register_pending([good])
    assert _state_of(s.pool, good.slot) is NodeState.PENDING


def quarantine_counts_failures_then_blacklists(make: SubjectFactory) -> None:
    s = make(2)
    n = s.nodes[0]
    s.pool.register_pending([n])
    q = s.pool.quarantine(n.slot, "xid-79", "GPU 3 fell off the bus (Xid 79)")
    assert q.state is NodeState.QUARANTINED and q.reason_code == "xid-79" and q.failures == 1
    assert "Xid 79" in (q.reason or "")
    assert s.pool.quarantine(n.slot, "xid-79", "GPU 3 fell off the bus (Xid 79)") == q  # no double count
    seen = s.pool.state().get(n.slot)
    assert seen is not None and seen.state is NodeState.QUARANTINED and seen.failures == 1
    assert seen.reason_code == "xid-79"
    s.pool.register_pending([n])  # a retest: failures survive
    assert s.pool.state().get(n.slot).failures == 1  # type: ignore[union-attr]
    b = s.pool.quarantine(n.slot, "nvlink-down", "NVLink 4 down on GPU 1")
    assert b.state is NodeState.BLACKLISTED and b.failures == 2
    _refused(lambda: s.pool.admit(n.slot, record(n)), n.slot, "blacklist")
    _refused(lambda: s.pool.register_pending([n]), n.slot, "blacklist")
    assert _state_of(s.pool, n.slot) is NodeState.BLACKLISTED
    c = s.pool.clear(n.slot)
    assert c.state is NodeState.PENDING and c.failures == 0
    assert s.pool.admit(n.slot, record(n)).state is NodeState.ADMITTED


def quarantine_takes_an_admitted_node_out_and_checks_the_code(make: SubjectFactory) -> None:
    s = make(3)
    n = s.nodes[1]
    s.pool.register_pending([n])
    s.pool.admit(n.slot, record(n))
    _refused(lambda: s.pool.quarantine(n.slot, "not a taint value!", "x"), n.slot, "taint")
    assert _state_of(s.pool, n.slot) is NodeState.ADMITTED
    q = s.pool.quarantine(n.slot, "ecc-uncorrectable", "uncorrectable ECC on GPU 0")
    assert q.state is NodeState.QUARANTINED and q.record_digest is None
    assert _state_of(s.pool, n.slot) is NodeState.QUARANTINED


def operator_blacklist_and_clear(make: SubjectFactory) -> None:
    s = make(5)
    n = s.nodes[2]
    s.pool.register_pending([n])
    s.pool.admit(n.slot, record(n))
    b = s.pool.blacklist(n.slot, "rack power fault")
    assert b.state is NodeState.BLACKLISTED and "rack power fault" in (b.reason or "")
    assert s.pool.blacklist(n.slot, "rack power fault") == b
    seen = s.pool.state().get(n.slot)
    assert seen is not None and seen.state is NodeState.BLACKLISTED
    assert s.pool.clear(n.slot).state is NodeState.PENDING
    assert s.pool.clear(n.slot).state is NodeState.PENDING  # idempotent


def release_leaves_the_pool_but_the_slot_remembers_failures(make: SubjectFactory) -> None:
    s = make(2)
    n = s.nodes[3]
    s.pool.register_pending([n])
    s.pool.quarantine(n.slot, "efa-missing", "EFA device 2 missing")
    s.pool.release(n.slot)
    s.pool.release(n.slot)  # idempotent
    assert _state_of(s.pool, n.slot) is None
    s.pool.register_pending([replace(n, instance_id="i-0replacement0000")])
    back = s.pool.state().get(n.slot)
    assert back is not None and back.state is NodeState.PENDING and back.failures == 1
    assert s.pool.quarantine(n.slot, "xid-48", "double-bit ECC (Xid 48)").state is NodeState.BLACKLISTED
    s.pool.release(n.slot)  # a blacklisted slot stays listed for replacement
    assert _state_of(s.pool, n.slot) is NodeState.BLACKLISTED


def state_lists_each_state(make: SubjectFactory) -> None:
    s = make(1)
    p, a, q = s.nodes[0], s.nodes[1], s.nodes[2]
    s.pool.register_pending([p, a, q])
    s.pool.admit(a.slot, record(a))
    s.pool.quarantine(q.slot, "xid-79", "fell off the bus")
    state = s.pool.state()
    assert {n.slot for n in state.by_state(NodeState.PENDING)} >= {p.slot}
    assert {n.slot for n in state.by_state(NodeState.ADMITTED)} == {a.slot}
    assert {n.slot for n in state.by_state(NodeState.BLACKLISTED)} == {q.slot}  # 1 failure blacklists here
    assert state.get(q.slot).reason_code == "xid-79"  # type: ignore[union-attr]


def a_pool_that_is_down_raises_pool_error(make: SubjectFactory) -> None:
    s = make(2)
    if s.down is None:
        pytest.skip("this backend cannot be down (a local file)")
    down = s.down()
    n = s.nodes[0]
    _refused(lambda: down.register_pending([n]), None)
    _refused(lambda: down.admit(n.slot, record(n)), n.slot)
    _refused(lambda: down.state(), None)


CHECKS: tuple[Callable[[SubjectFactory], None], ...] = (
    registered_nodes_are_pending_with_block_and_partition,
    admit_attaches_the_record_and_is_idempotent,
    admit_refuses_a_record_for_another_slot_or_not_admit,
    unknown_nodes_are_errors_never_skipped,
    a_partition_the_pool_lacks_refuses_the_whole_call,
    quarantine_counts_failures_then_blacklists,
    quarantine_takes_an_admitted_node_out_and_checks_the_code,
    operator_blacklist_and_clear,
    release_leaves_the_pool_but_the_slot_remembers_failures,
    state_lists_each_state,
    a_pool_that_is_down_raises_pool_error,
)


def check_id(check: Callable[..., None]) -> str:
    return check.__name__
