"""The rollout report's model: one versioned JSON document, the lines it is made of.

Apart from gpufleet.reports.rollout (which builds it from the journal and writes its files) so
that the Document built from it (gpufleet.reports.rollout_document) needs the model alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import gpufleet
from gpufleet.gates.verdict import CheckResult

REPORT_SCHEMA_VERSION = 1


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PartitionLine(_M):
    name: str
    units_planned: int
    units_available: int
    gpus_available: int


class BatchLine(_M):
    number: int
    canary: bool
    stage: str
    nodes: int
    admitted: int
    quarantined: int
    first_failure_rate: float
    seconds: dict[str, float] = Field(default_factory=dict)
    link_faults: list[tuple[str, str]] = Field(default_factory=list)
    reason: str = ""


class Quarantine(_M):
    slot: str
    instance_id: str | None
    batch: int
    reason_code: str
    reason: str = ""
    replaced: bool
    blacklisted: bool = False


class Replacement(_M):
    slot: str
    old_instance: str | None
    new_instance: str | None


class ResizeLine(_M):
    """A grow or shrink by whole blocks (gpufleet.plan.resize), as the journal recorded it."""

    kind: str  # grow | shrink
    from_nodes: int
    to_nodes: int
    added: list[str] = Field(default_factory=list)  # grow: the new slots
    new_batches: list[int] = Field(default_factory=list)
    released: list[str] = Field(default_factory=list)  # shrink: the slots drained, released and terminated
    released_blocks: list[int] = Field(default_factory=list)
    status: str = "started"  # started | finished (a shrink: its last released slot terminated)


class EarlierAttempt(_M):
    attempt: int
    reason_codes: list[str]
    bundle: str | None = None
    recheck: str | None = None  # set aside because what it judged changed (else: failed, then retried)


class AcceptanceLine(_M):
    """One acceptance stage: its latest attempt's verdict and every check (measured vs floor)."""

    stage: str
    status: str  # not-run | running | passed | failed | retry | not-applicable
    verdict: str | None = None  # the worst check verdict (PASS, WARN, REMEDIATE, QUARANTINE)
    attempts: int = 0
    reason_codes: list[str] = Field(default_factory=list)
    seconds: float | None = None
    timing: str | None = None  # modelled | measured
    bundle: str | None = None  # relative to the stack's state dir
    figures: str = ""
    imported_from: str | None = None  # the pre-journal outcome file the verdict came from
    reason: str = ""  # why a not-applicable stage had nothing to test
    earlier: list[EarlierAttempt] = Field(default_factory=list)  # attempts retried after failing, or rechecked
    checks: list[CheckResult] = Field(default_factory=list)


class RolloutReport(_M):
    schema_version: int = REPORT_SCHEMA_VERSION
    kind: Literal["rollout"] = "rollout"  # the envelope every JSON document starts with (gpufleet.envelope)
    stack: str
    generated_at: datetime
    gpufleet_version: str = gpufleet.__version__
    status: str  # complete | short | halted | in-progress
    halt_reason: str = ""
    instance_type: str
    target_nodes: int
    target_gpus: int
    admitted_nodes: int
    admitted_gpus: int
    spare_nodes: int
    spares_used: int
    partitions: list[PartitionLine]
    batches: list[BatchLine]
    acceptance: list[AcceptanceLine] = Field(default_factory=list)
    quarantined: list[Quarantine]
    replacements: list[Replacement]
    link_faults: list[tuple[str, str]]
    short: list[str]
    timeline: dict[str, Any]
    pipelining: bool
    wall_seconds: float | None = None
    resizes: list[ResizeLine] = Field(default_factory=list)  # grows and shrinks, in journal order
