"""A patrol as a versioned JSON model and a report Document (shared renderers: Markdown for a CI
step summary, JUnit with one case per node and check, HTML).

Why JUnit cases per node: a scheduled CI job shows a node that failed its patrol as a failed test,
with the check, the measurement and the expectation, without anyone reading the log.
Why an outcome per node (`outcomes`, `counts`): a node the patrol left to a real job (`yielded`:
taken before its round, or its lowest-priority hold preempted: `preempted`, Slurm's patrol QOS or
Kueue's gpufleet-patrol class) is neither passed nor failed; a reader must see it was not rechecked.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import gpufleet
from gpufleet.daytwo.patrol_run import PatrolOutcome
from gpufleet.reports.document import (CaseStatus, Document, Paragraph, Section, Status, SummaryItem, Table, TestCase,
                                    TestCases, Tone)
from gpufleet.reports.write import write_report

SCHEMA_VERSION = 1
SUITE = "gpufleet-patrol"
OUTCOMES = ("passed", "failed", "deferred", "unreachable", "yielded", "skipped-busy", "no-instance")


class PatrolNode(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    slot: str
    passed: bool
    reason_code: str | None = None
    reason: str = ""
    busbw_gbs: float | None = None
    admission_busbw_gbs: float | None = None
    warnings: list[str] = []


class PatrolReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: Literal["patrol"] = "patrol"  # the envelope every JSON document starts with (gpufleet.envelope)
    stack: str
    generated_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    started: datetime
    who: str
    modelled_seconds: float
    checked: list[PatrolNode]
    skipped_busy: list[str]
    deferred: list[str]
    unreachable: dict[str, str]
    no_instance: list[str]
    quarantined: dict[str, dict]
    blacklisted: list[str]
    yielded: list[str] = []  # left to a real job: taken before its round, or its hold preempted
    preempted: list[str] = []  # of `yielded`: held by the patrol's lowest-priority job, then preempted
    held: bool = False  # the rounds ran as the pool's lowest-priority jobs (Slurm QOS / Kueue class)
    rounds: int = 0
    budget: dict[str, int] = {}  # partition -> nodes rechecked at once (from the plan)
    outcomes: dict[str, str] = {}  # slot -> one of OUTCOMES
    counts: dict[str, int] = {}  # outcome -> nodes
    gpufleet_version: str = gpufleet.__version__

    @property
    def status(self) -> Status:
        return Status.FAILED if self.quarantined else Status.OK


def outcomes(out: PatrolOutcome) -> dict[str, str]:
    """One outcome per node the patrol looked at; the later entries win (a deferred node was
    judged failing first, a yielded one may have been held first)."""
    per: dict[str, str] = {}
    for r in out.checked:
        per[r.slot] = "passed" if r.passed else "failed"
    for kind, slots in (("unreachable", sorted(out.unreachable)), ("deferred", out.deferred),
                        ("yielded", out.yielded), ("skipped-busy", out.skipped_busy),
                        ("no-instance", out.no_instance)):
        per.update(dict.fromkeys(slots, kind))
    return dict(sorted(per.items()))


def count(per: dict[str, str]) -> dict[str, int]:
    return {k: n for k in OUTCOMES if (n := sum(v == k for v in per.values()))}


def build(out: PatrolOutcome) -> tuple[PatrolReport, list]:
    per = outcomes(out)
    nodes = [PatrolNode(slot=r.slot, passed=r.passed, reason_code=r.reason_code, reason=r.reason, busbw_gbs=r.busbw_gbs,
                        admission_busbw_gbs=r.baseline_gbs, warnings=list(r.warnings)) for r in out.checked]
    report = PatrolReport(stack=out.stack, started=out.started, who=out.who, modelled_seconds=out.seconds,
                          checked=nodes, skipped_busy=out.skipped_busy, deferred=out.deferred,
                          unreachable=out.unreachable, no_instance=out.no_instance, quarantined=out.quarantined,
                          blacklisted=out.blacklisted, yielded=sorted(set(out.yielded)),
                          preempted=sorted(set(out.preempted)), held=out.held, rounds=out.rounds, budget=out.budget,
                          outcomes=per, counts=count(per))
    return report, [c for r in out.checked for c in r.checks]


def document(report: PatrolReport, out: PatrolOutcome) -> Document:
    q = report.quarantined
    summary = [
        SummaryItem(key="checked", value=f"{len(report.checked)} idle admitted node(s)"),
        SummaryItem(key="skipped (busy)", value=str(len(report.skipped_busy))),
        SummaryItem(key="yielded to real jobs", value=f"{len(report.yielded)} ({len(report.preempted)} preempted)",
                    tone=Tone.WARNING if report.yielded else Tone.GOOD),
        SummaryItem(key="quarantined", value=str(len(q)), tone=Tone.BAD if q else Tone.GOOD),
        SummaryItem(key="blacklisted (replace)", value=str(len(report.blacklisted)),
                    tone=Tone.BAD if report.blacklisted else Tone.GOOD),
        SummaryItem(key="asked by", value=report.who),
    ]
    sections = []
    if q:
        rows = [[slot, v["reason_code"], v["state"], v["failures"], v["reason"]] for slot, v in sorted(q.items())]
        blocks: list = [Table(title="Quarantined", columns=["slot", "code", "pool state", "failures", "reason"],
                              rows=rows)]
        if report.blacklisted:
            blocks.append(Paragraph(text="Blacklisted, to replace: " + ", ".join(f"`{s}`" for s in report.blacklisted)
                                    + " (`gpufleet pool clear SLOT --reason ...`, then `gpufleet pool replace SLOT "
                                    "--reason ...`)", tone=Tone.BAD))
        sections.append(Section(title="Failing nodes", blocks=blocks))
    if report.deferred:
        sections.append(Section(title="Deferred", blocks=[Paragraph(
            text="Failed, but running work by the time of the verdict (rechecked next patrol): "
                 + ", ".join(f"`{s}`" for s in report.deferred), tone=Tone.WARNING)]))
    if report.yielded:
        how = "held by the patrol's lowest-priority job" if report.held else "rechecked without holds"
        rows = [[slot, "preempted" if slot in report.preempted else "taken before its round"]
                for slot in report.yielded]
        sections.append(Section(title="Yielded to real jobs", blocks=[Table(
            title="Not rechecked: left to the job (rechecked next patrol)", columns=["slot", "how"], rows=rows,
            caption=f"{len(rows)} node(s); rounds {how}, {report.rounds} round(s), budget per partition "
                    + ", ".join(f"{p} {n}" for p, n in sorted(report.budget.items())))]))
    regress = [[n.slot, n.busbw_gbs, n.admission_busbw_gbs] for n in report.checked
               if n.busbw_gbs is not None and n.admission_busbw_gbs is not None]
    regress.sort(key=lambda r: (r[1] or 0) / (r[2] or 1))
    if regress:
        sections.append(Section(title="Intra-node busbw against each node's admission", blocks=[Table(
            title="Lowest ratios first", columns=["slot", "now GB/s", "at admission GB/s"], rows=regress[:50],
            caption=f"{len(regress)} node(s) measured; the 50 lowest ratios shown")]))
    cases = []
    for r in out.checked:
        for c in r.checks:
            failed = c.verdict.blocks_admission
            cases.append(TestCase(suite=SUITE, classname=f"patrol.{r.slot}", name=c.check_id,
                                   status=CaseStatus.FAIL if failed else CaseStatus.PASS,
                                   failure_type=c.verdict.value if failed else "",
                                   message=f"{c.reason_code}: {c.message}" if failed else "",
                                   details=f"measured: {c.measured}\nexpected: {c.expected}" if failed else ""))
    for slot, message in sorted(report.unreachable.items()):
        cases.append(TestCase(suite=SUITE, classname=f"patrol.{slot}", name="reachable", status=CaseStatus.FAIL,
                              failure_type="QUARANTINE", message=f"unreachable: {message}"))
    sections.append(Section(title="Checks", blocks=[TestCases(title="Patrol checks", cases=cases)]))
    return Document(kind="patrol", title=f"Patrol of {report.stack}", stack=report.stack,
                    generated_at=datetime.now(timezone.utc), status=report.status, summary=summary, sections=sections)


def write(out: PatrolOutcome, directory: Path) -> tuple[PatrolReport, dict[str, Path]]:
    report, _checks = build(out)
    return report, write_report(document(report, out), report, directory, "patrol")
