"""The admission record: one JSON per node saying what was checked, measured and decided.

Why versioned: records are stored in the journal, shown in reports and attached to the pool
(k8s annotation / Slurm comment) long after the code that wrote them has changed.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from pydantic import BaseModel, ConfigDict, Field

import gpufleet
from gpufleet.gates.isolation import IsolationResult, NodeIsolation, node_isolation
from gpufleet.gates.verdict import Action, CheckResult, Verdict

SCHEMA_VERSION = 1


class BusbwFigures(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    intra_node_gbs: float | None = None
    intra_node_floor_gbs: float | None = None
    cohort_median_gbs: float | None = None
    multi_node_gbs: dict[str, float] = Field(default_factory=dict)  # partner/ring label -> busbw


class AdmissionRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    slot: str
    instance_id: str | None = None
    instance_type: str
    stack: str | None = None
    batch: int | None = None
    block: int | None = None
    bom_digest: str
    verdict: Verdict
    action: Action
    attempt: int = 1
    reason_codes: tuple[str, ...] = ()
    message: str = ""
    checks: tuple[CheckResult, ...]
    busbw: BusbwFigures = BusbwFigures()
    collected_started: datetime | None = None
    collected_ended: datetime | None = None
    decided_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    gpufleet_version: str = gpufleet.__version__

    @property
    def admitted(self) -> bool:
        return self.action is Action.ADMIT


# ------------------------------------------------------------------ multi-node results

MULTINODE_CHECK = "nccl.multinode"
MULTINODE_REF = "gates-research.md (d) item 4"


def multinode_check(iso: NodeIsolation) -> CheckResult:
    """The network gate as one check result, so the record lists it like every other check."""
    floor, ring_floor = iso.floor, iso.ring_floor if iso.ring_floor is not None else iso.floor
    expected = (f"pairs >= {floor:g} GB/s with known-good partners (NCCL_ALGO=Ring); ring >= {ring_floor:g} GB/s"
                if floor is not None else "pairs and ring at or above the multi-node floor")
    pairs = ", ".join(f"{p} {v:g}" for p, v in iso.pair_gbs.items()) or "none"
    rings = ", ".join(f"{k} {v:g}" for k, v in iso.ring_gbs.items()) or "none"
    measured = f"pairs [{pairs}] GB/s; rings [{rings}] GB/s"
    if iso.outcome == "quarantined":
        verdict, message = Verdict.QUARANTINE, (
            "failed with different known-good partners (node, not link)" if iso.reason_code == "efa-pair-fail"
            else "slows rings with known-good companions" if iso.reason_code == "ring-underperform"
            else "multi-node isolation blamed this node")
    elif iso.outcome == "unresolved":
        verdict, message = Verdict.REMEDIATE, "no known-good partner left to attribute a failing pair; retest"
    else:
        verdict, message = Verdict.PASS, ""
    return CheckResult(check_id=MULTINODE_CHECK, severity="Q", measured=measured[:2000], expected=expected,
                       verdict=verdict, reason_code=iso.reason_code if verdict is not Verdict.PASS else None,
                       message=f"{iso.reason_code}: {message}" if message else "", research_ref=MULTINODE_REF)


_ACTION = {Verdict.QUARANTINE: Action.QUARANTINE, Verdict.REMEDIATE: Action.RETEST}


def with_multinode(record: AdmissionRecord, iso: NodeIsolation) -> AdmissionRecord:
    """The record with the multi-node outcome folded in: figures, one more check, worst-of verdict.

    Pure. Worst-of: a worse network verdict replaces verdict, action and reason codes; an equal
    non-PASS one adds its code; a better one (a PASS) changes only the figures and checks. Applying
    it twice for the same node replaces the earlier multi-node check instead of adding a second.
    """
    if iso.node != record.slot:
        raise ValueError(f"isolation result for {iso.node} applied to the record of {record.slot}")
    check = multinode_check(iso)
    checks = tuple(c for c in record.checks if c.check_id != MULTINODE_CHECK) + (check,)
    figures = {**record.busbw.multi_node_gbs, **iso.pair_gbs, **iso.ring_gbs}
    update: dict[str, object] = {"checks": checks,
                                 "busbw": record.busbw.model_copy(update={"multi_node_gbs": figures})}
    v = check.verdict
    if v.rank > record.verdict.rank:
        update.update(verdict=v, action=_ACTION.get(v, record.action), reason_codes=(check.reason_code,),
                      message=check.message)
    elif v is record.verdict and v is not Verdict.PASS and check.reason_code:
        update.update(reason_codes=tuple(dict.fromkeys(record.reason_codes + (check.reason_code,))),
                      message=record.message if check.message in record.message
                      else "; ".join(m for m in (record.message, check.message) if m))
    return record.model_copy(update=update)


class BatchNetworkResult(BaseModel):
    """What the network gates say about the batch rather than about one node: faulty links and
    rings to escalate (to AWS / the network team), never a node quarantine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    link_faults: tuple[tuple[str, str], ...] = ()
    ring_faults: tuple[tuple[str, ...], ...] = ()
    quarantined: dict[str, str] = Field(default_factory=dict)
    unresolved: tuple[str, ...] = ()
    rounds: int = 0
    runs: int = 0


def apply_isolation(records: Sequence[AdmissionRecord], result: IsolationResult
                    ) -> tuple[list[AdmissionRecord], BatchNetworkResult]:
    """Fold an isolation run into the batch's records (nodes outside the batch are returned
    unchanged) and return the batch-level result."""
    out = []
    for r in records:
        try:
            iso = node_isolation(result, r.slot)
        except KeyError:
            out.append(r)
            continue
        out.append(with_multinode(r, iso))
    batch = BatchNetworkResult(link_faults=result.link_faults, ring_faults=result.ring_faults,
                               quarantined=dict(result.quarantined), unresolved=result.unresolved,
                               rounds=len(result.rounds), runs=result.runs)
    return out, batch
