"""The admission record: one JSON per node saying what was checked, measured and decided.

Why versioned: records are stored in the journal, shown in reports and attached to the pool
(k8s annotation / Slurm comment) long after the code that wrote them has changed.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

import infra
from infra.gates.verdict import Action, CheckResult, Verdict

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
    gpufleet_version: str = infra.__version__

    @property
    def admitted(self) -> bool:
        return self.action is Action.ADMIT
