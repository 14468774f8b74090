"""The drift report: what differs from code, from the bill of materials and from the last baselines.

Three layers (DESIGN.md section 1, "Drift"), each judged by pure functions in its own module
(`drift_cloud`, `drift_software`, `drift_performance`) from what thin adapters (`sources`) read:

- cloud: code vs state (a preview that expects no changes), cloud vs state (a refresh preview),
  and what Pulumi does not know (orphan instances, hand-added security-group rules, instances
  unlike their launch template, capacity about to expire);
- software: installed versions vs the BOM, and the tasks an Ansible check-mode run would change;
- performance: the latest baselines per node, block and scale vs their history.

Why a layer carries its own status: a layer that could not run (no credentials, the Pulumi CLI
missing, no node answering) must never read as clean. The report's outcome is ERROR (exit 1)
when any layer could not run, DRIFT (exit 4) when any finding exists, OK (exit 0) otherwise.

`DriftReport` is the versioned JSON truth; `drift_document` maps it to the neutral Document every
renderer reads.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from enum import Enum
from typing import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field, computed_field

import gpufleet
from gpufleet.reports.document import (CaseStatus, Cell, Document, LineHistory, Paragraph, Section, Series, Status,
                                    SummaryItem, Table, TestCase, TestCases, Tone)

DRIFT_SCHEMA_VERSION = 1
SUITE = "gpufleet-drift"


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Layer(str, Enum):
    CLOUD = "cloud"
    SOFTWARE = "software"
    PERFORMANCE = "performance"


LAYERS: tuple[Layer, ...] = (Layer.CLOUD, Layer.SOFTWARE, Layer.PERFORMANCE)


class Severity(str, Enum):
    """How urgently a finding needs a person; reports sort by it (worst first)."""

    CRITICAL = "critical"  # the pool is not what it claims to be (mixed versions, capacity about to vanish)
    HIGH = "high"  # a resource or node differs from code or BOM
    MEDIUM = "medium"  # a change that a converge would make, a slower baseline
    LOW = "low"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)


class Finding(_M):
    """One difference. `subject` is what differs (a URN, an instance id, a slot, `block 3`);
    `field` which part of it; `expected`/`found` what code, BOM or history says vs what is there.
    Values that Pulumi marks secret are `[secret]`, never their plaintext."""

    layer: Layer
    check: str  # e.g. code-vs-state, cloud-vs-state, orphan-instance, sg-rule-added, version, check-mode
    subject: str
    field: str = ""
    expected: str | None = None
    found: str | None = None
    severity: Severity = Severity.HIGH
    message: str


class LayerStatus(str, Enum):
    CLEAN = "clean"
    DRIFT = "drift"
    ERROR = "error"  # the layer (or one of its checks) could not run: never read as clean
    SKIPPED = "skipped"  # not asked for (--layer)


class BlockHistory(_M):
    """The performance layer's evidence: median pair busbw per block over the compared runs (oldest
    first, the latest last), for the regressed blocks and the median over all blocks."""

    runs: list[str]
    median_of_blocks: list[float | None]
    regressed: dict[str, list[float | None]] = Field(default_factory=dict)


class LayerResult(_M):
    layer: Layer
    status: LayerStatus
    checks: list[str] = Field(default_factory=list)  # the checks that ran to completion
    findings: list[Finding] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)  # why a check could not run
    notes: list[str] = Field(default_factory=list)
    history: BlockHistory | None = None  # performance only


def layer_result(layer: Layer, checks: Sequence[str], findings: Iterable[Finding], errors: Sequence[str] = (),
                 notes: Sequence[str] = (), history: BlockHistory | None = None) -> LayerResult:
    """A layer's status from what ran: any error -> ERROR (even with findings), else DRIFT or CLEAN."""
    found = sort_findings(findings)
    status = LayerStatus.ERROR if errors else LayerStatus.DRIFT if found else LayerStatus.CLEAN
    return LayerResult(layer=layer, status=status, checks=list(checks), findings=found, errors=list(errors),
                       notes=list(notes), history=history)


def skipped(layer: Layer) -> LayerResult:
    return LayerResult(layer=layer, status=LayerStatus.SKIPPED)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.severity.rank, f.layer.value, f.check, f.subject, f.field))


class DriftReport(_M):
    schema_version: int = DRIFT_SCHEMA_VERSION
    kind: str = "drift"
    stack: str
    generated_at: datetime
    layers: list[LayerResult]
    gpufleet_version: str = gpufleet.__version__

    @property
    def findings(self) -> list[Finding]:
        return sort_findings(f for layer in self.layers for f in layer.findings)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> Status:
        """In the JSON too, so a pipeline reads the outcome without re-deriving it."""
        if any(layer.status is LayerStatus.ERROR for layer in self.layers):
            return Status.ERROR
        return Status.DRIFT if self.findings else Status.OK


# ------------------------------------------------------------------ the neutral document

_TONE = {LayerStatus.CLEAN: Tone.GOOD, LayerStatus.DRIFT: Tone.BAD, LayerStatus.ERROR: Tone.BAD,
         LayerStatus.SKIPPED: Tone.INFO}
_COLUMNS = ["severity", "check", "subject", "field", "expected", "found", "message"]


def finding_rows(findings: Sequence[Finding]) -> list[list[Cell]]:
    return [[f.severity.value, f.check, f.subject, f.field, f.expected, f.found, f.message] for f in findings]


def drift_cases(report: DriftReport) -> list[TestCase]:
    """One case per layer check that ran clean or drifted, one failing case per finding, one error
    case per check that could not run (JUnit then shows drift natively, and a broken layer as an error)."""
    cases: list[TestCase] = []
    for layer in report.layers:
        if layer.status is LayerStatus.SKIPPED:
            continue
        by_check = Counter(f.check for f in layer.findings)
        for check in layer.checks:
            if not by_check.get(check):
                cases.append(TestCase(suite=SUITE, classname=f"drift.{layer.layer.value}", name=check,
                                      status=CaseStatus.PASS))
        for f in layer.findings:
            cases.append(TestCase(
                suite=SUITE, classname=f"drift.{layer.layer.value}.{f.check}", name=f"{f.subject} {f.field}".strip(),
                status=CaseStatus.FAIL, failure_type=f.severity.value.upper(), message=f.message,
                details=f"expected: {f.expected}\nfound: {f.found}"))
        for i, error in enumerate(layer.errors):
            cases.append(TestCase(suite=SUITE, classname=f"drift.{layer.layer.value}", name=f"could not run #{i + 1}",
                                  status=CaseStatus.ERROR, failure_type="LAYER_ERROR", message=error))
    return cases


def drift_document(report: DriftReport) -> Document:
    findings = report.findings
    severities = Counter(f.severity for f in findings)
    summary = [SummaryItem(key=layer.layer.value, value=layer.status.value, tone=_TONE[layer.status])
               for layer in report.layers]
    summary.append(SummaryItem(key="findings", value=str(len(findings)), tone=Tone.BAD if findings else Tone.GOOD))
    summary += [SummaryItem(key=s.value, value=str(severities[s]), tone=Tone.BAD if s.rank <= 1 else Tone.WARNING)
                for s in Severity if severities[s]]
    sections = []
    for layer in report.layers:
        if layer.status is LayerStatus.SKIPPED:
            sections.append(Section(title=f"{layer.layer.value}: not run",
                                    blocks=[Paragraph(text="Not asked for (--layer).")]))
            continue
        blocks: list = [Paragraph(text=f"Could not run: {e}", tone=Tone.BAD) for e in layer.errors]
        if layer.findings:
            blocks.append(Table(title=f"{len(layer.findings)} finding(s)", columns=_COLUMNS,
                                rows=finding_rows(layer.findings)))
        elif not layer.errors:
            blocks.append(Paragraph(text="No drift: " + ", ".join(layer.checks) + ".", tone=Tone.GOOD))
        blocks += [Paragraph(text=n) for n in layer.notes]
        if layer.history is not None and len(layer.history.runs) > 1:
            blocks.append(_history_chart(layer.history))
        sections.append(Section(title=f"{layer.layer.value}: {layer.status.value}", blocks=blocks))
    sections.append(Section(title="Checks", blocks=[TestCases(title="Drift checks", cases=drift_cases(report))]))
    title = {Status.OK: "no drift", Status.DRIFT: f"{len(findings)} finding(s)",
             Status.ERROR: "incomplete: a layer could not run"}[report.status]
    return Document(kind="drift", title=f"Drift of {report.stack}: {title}", stack=report.stack,
                    generated_at=report.generated_at, status=report.status, summary=summary, sections=sections)


def _history_chart(h: BlockHistory) -> LineHistory:
    series = [Series(name="median of all blocks", values=h.median_of_blocks)]
    series += [Series(name=f"block {b}", values=v) for b, v in h.regressed.items()]
    return LineHistory(title="Median pair busbw per block over runs", unit="GB/s", runs=h.runs, series=series,
                       caption="The regressed blocks against the median of all blocks; the last run is the latest "
                               "baseline." if h.regressed else "No block regressed; the median of all blocks per run.")
