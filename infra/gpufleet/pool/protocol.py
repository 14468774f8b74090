"""The Pool port: what the rollout, upgrade and patrol ask of a scheduling pool.

Why one protocol: Kubernetes (taints, labels, annotations), Slurm (DRAIN/RESUME, node comments)
and the simulator (a file under the stack's state dir) must mean exactly the same thing by
pending, admitted, quarantined and blacklisted; one contract test suite runs against all three.

Semantics every adapter keeps (DESIGN.md section 5):
- Node names are slots. A replacement instance takes the slot of the node it replaces.
- `register_pending`: the node is in the pool but takes no work (k8s: taint
  `gpufleet.io/gate=pending:NoSchedule`; Slurm: DRAIN reason "gpufleet: pending gates").
- `admit`: only with an admission record for that slot whose action is ADMIT; removes the gate
  taint / RESUMEs, sets partition and block, attaches the record's digest and summary.
- `quarantine`: takes the node out of work with a short reason code (a valid taint value) and
  free text; counts a failure for the slot. A slot quarantined `failures_before_blacklist`
  times is BLACKLISTED: reported for replacement, never admitted again until `clear`.
- `release`: the slot's instance leaves the pool (stopped, terminated, replaced); the slot's
  failure count survives so a bad slot is still caught.
- Every call is idempotent (repeating it changes nothing more) and all-or-nothing for its node;
  an unknown node, a mismatching record or an unreachable pool raises a `PoolError` naming the
  node and the cause.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Mapping, Protocol, Sequence, runtime_checkable

from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.launch import LaunchSpec

GATE_TAINT = "gpufleet.io/gate"
PENDING_TAINT_VALUE = "pending"
QUARANTINE_TAINT = "gpufleet.io/quarantine"
PARTITION_LABEL = "node-restriction.kubernetes.io/gpufleet-partition"
BLOCK_LABEL = "node-restriction.kubernetes.io/gpufleet-block"
PENDING_REASON = "gpufleet: pending gates"


class NodeState(str, Enum):
    PENDING = "pending"
    ADMITTED = "admitted"
    QUARANTINED = "quarantined"
    BLACKLISTED = "blacklisted"


@dataclass(frozen=True)
class PendingNode:
    """A node to register: its slot, where it sits in the plan and the instance behind it."""

    slot: str
    block: int
    partition: str | None = None
    instance_id: str | None = None
    address: str | None = None  # private IP (Slurm NodeAddr, SSH launcher)


@dataclass(frozen=True)
class PoolNode:
    slot: str
    state: NodeState
    block: int | None = None
    partition: str | None = None
    instance_id: str | None = None
    reason_code: str | None = None  # quarantine / blacklist code (taint-safe)
    reason: str | None = None  # free text
    record_digest: str | None = None  # of the admission record it was admitted with
    failures: int = 0  # quarantines since the last clear
    busy: bool = False  # running work right now (drain and patrol respect it)


@dataclass(frozen=True)
class PoolState:
    nodes: Mapping[str, PoolNode] = field(default_factory=dict)

    def by_state(self, state: NodeState) -> list[PoolNode]:
        return [n for n in self.nodes.values() if n.state is state]

    def get(self, slot: str) -> PoolNode | None:
        return self.nodes.get(slot)


@dataclass(frozen=True)
class LaunchResult:
    """One multi-node run as the launcher saw it: raw output for the gates' parsers to judge."""

    name: str
    nodes: tuple[str, ...]
    exit_code: int
    output: str  # nccl-tests stdout + stderr, unparsed
    started: datetime
    ended: datetime
    command: str = ""


@runtime_checkable
class Launcher(Protocol):
    """Runs the gates' launch specs (srun, MPIJob/JobSet, mpirun over SSH) on the spec's nodes."""

    def run(self, specs: Sequence[LaunchSpec], timeout_s: float) -> list[LaunchResult]:
        """Run the specs (disjoint node sets, so in parallel) and return one result per spec, in order."""
        ...


@runtime_checkable
class Pool(Protocol):
    kind: str  # "kubernetes" | "slurm" | "sim": picks the launch-spec kind

    def register_pending(self, nodes: Sequence[PendingNode]) -> None: ...

    def admit(self, slot: str, record: AdmissionRecord) -> PoolNode: ...

    def quarantine(self, slot: str, reason_code: str, reason: str) -> PoolNode: ...

    def release(self, slot: str) -> None: ...

    def blacklist(self, slot: str, reason: str) -> PoolNode: ...

    def clear(self, slot: str) -> PoolNode: ...

    def state(self) -> PoolState: ...

    def launcher(self) -> Launcher: ...


@dataclass(frozen=True)
class Holder:
    """Running work that keeps a slot from draining, named the way an operator looks it up."""

    slot: str
    workload: str  # Kubernetes: <namespace>/<Kueue Workload, else owner Kind/name, else pod/name>
    pods: tuple[str, ...] = ()  # Kubernetes: the <namespace>/<pod> names holding GPUs on the slot's Node

    def __str__(self) -> str:
        return f"{self.workload} on {self.slot}"


@runtime_checkable
class HasHolders(Protocol):
    """A pool that can name the running work on its slots (Kubernetes, Slurm, the simulator).

    Why apart from `Evicting`: a held drain is reported with the workloads that hold it on every
    pool that can say, though only Kubernetes ends work; a Slurm drain waits for its jobs by design.
    `holders`: the work running on the slots now, one entry per (work, slot); none for an idle slot.
    """

    def holders(self, slots: Sequence[str]) -> list[Holder]: ...


@runtime_checkable
class Evicting(HasHolders, Protocol):
    """What a pool that can end running work offers a drain (Kubernetes; optional, nothing else needs it).

    `cordon`: mark the slots' nodes unschedulable (False: schedulable again); idempotent.
    `holders` (from `HasHolders`): the work holding the slots' GPUs now.
    `evict`: ask every GPU pod on the slots to leave through the eviction API, honouring disruption
    budgets: a refused eviction is tried again with backoff until `deadline_s`; returns what is still
    refused then (pods already gone count as evicted).
    """

    def cordon(self, slots: Sequence[str], on: bool = True) -> None: ...

    def evict(self, slots: Sequence[str], deadline_s: float) -> list[Holder]: ...


def record_digest(record: AdmissionRecord) -> str:
    """A stable digest of an admission record (what the pool attaches and the journal keeps)."""
    return "sha256:" + hashlib.sha256(record.model_dump_json().encode()).hexdigest()


def record_summary(record: AdmissionRecord, limit: int = 240) -> str:
    """One line for a Slurm comment or a k8s annotation: verdict, batch, busbw, BOM digest."""
    bw = record.busbw.intra_node_gbs
    parts = [record.verdict.value, f"batch={record.batch}", f"block={record.block}"]
    if bw is not None:
        parts.append(f"busbw={bw:.1f}GB/s")
    parts += [f"bom={record.bom_digest[:19]}", f"at={record.decided_at:%Y-%m-%dT%H:%MZ}"]
    return " ".join(parts)[:limit]


def admit_all(pool: Pool, items: Sequence[tuple[str, AdmissionRecord]]) -> list[PoolNode]:
    """Admit many nodes, in one pool operation where the adapter offers it (`admit_many`).

    Why: a batch of 25-250 nodes is admitted at once; the simulator's pool file and Slurm's
    scontrol make one write for all of them, instead of one fsync or one process per node.
    """
    many = getattr(pool, "admit_many", None)
    if many is not None:
        return list(many(items))
    return [pool.admit(slot, record) for slot, record in items]
