"""The rollout report (RolloutReport + the admission records) -> a report Document: the summary,
the acceptance stages (every check, measured vs floor, and each stage's verdict), partitions and
batches, the rollout timeline per batch and stage, the busbw chart and pair heat map of the gated
nodes, quarantines, link faults, and JUnit cases per node and check, per acceptance check, one
per record-less quarantine and one for the rollout's own outcome.

Why the JUnit cases: a CI job running `gpufleet rollout` shows failed gates natively, and a
rollout that ended short or halted fails its `target.<stack>` case even when every gated node passed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.gates.admission import AdmissionRecord
from gpufleet.reports.document import (Block, CaseStatus, Cell, Document, Paragraph, Section, Span, Status, SummaryItem,
                                    Table, TestCase, TestCases, Timeline, Tone)
from gpufleet.reports.gate_document import busbw_charts, check_case, gate_cases, pair_heat_map
from gpufleet.reports.render.text import duration, number

if TYPE_CHECKING:
    from gpufleet.reports.rollout_model import RolloutReport

ROLLOUT_SUITE = "gpufleet-rollout"
PROVISION = "provision"
NOT_APPLICABLE = "not-applicable"
ACCEPTANCE_LANE = "acceptance"
TIMELINE_NOTE = ("Stages after provisioning run back to back up to the batch's end; provisioning is drawn ending "
                 "where they start (under pipelining it may have finished earlier and waited; the canary's while "
                 "the network base check ran on its first hosts). The acceptance stages are on the critical path: "
                 "storage before the canary is provisioned, network on its first hosts, the smoke job before "
                 "batch 2.")
_STATUS = {"complete": Status.OK, "in-progress": Status.OK, "short": Status.FAILED, "halted": Status.FAILED}


def timeline_spans(report: RolloutReport) -> list[Span]:
    """Each worked batch's stages laid back to back, ending when the schedule in use ends the batch.

    The report keeps each batch's end time and its seconds per stage, not stage start times: the
    stages after provisioning run back to back up to the batch's end, and provisioning is drawn
    ending where they start (under pipelining it may have finished earlier and waited). The
    acceptance stages, whose start and end the timeline keeps, share one lane.
    """
    worked = sorted((b for b in report.batches if b.seconds), key=lambda b: b.number)
    ends = report.timeline.get("batch_end_s", [])
    spans = []
    for b, end in zip(worked, ends):
        lane = f"batch {b.number}" + (" (canary)" if b.canary else "")
        after = [(k, v) for k, v in b.seconds.items() if k != PROVISION]
        # the timeline's ends are rounded to 0.1 s and the seconds are not: never before 0
        t = max(end - sum(v for _, v in after), 0.0)
        if PROVISION in b.seconds:
            spans.append(Span(lane=lane, stage=PROVISION, start=max(t - b.seconds[PROVISION], 0.0), end=t))
        for stage, seconds in after:
            spans.append(Span(lane=lane, stage=stage, start=t, end=t + seconds))
            t += seconds
    spans += [Span(lane=ACCEPTANCE_LANE, stage=stage, start=start, end=end)
              for stage, (start, end) in report.timeline.get("acceptance_s", {}).items()]
    return spans


def rollout_cases(report: RolloutReport, records: Sequence[AdmissionRecord]) -> list[TestCase]:
    cases = [check_case(c, ROLLOUT_SUITE, f"acceptance.{a.stage}") for a in report.acceptance for c in a.checks]
    cases += [TestCase(suite=ROLLOUT_SUITE, classname=f"acceptance.{a.stage}", name=a.stage, status=CaseStatus.SKIP,
                       message=a.reason) for a in report.acceptance if a.status == NOT_APPLICABLE]
    cases += gate_cases(records, ROLLOUT_SUITE)
    recorded = {(r.slot, r.instance_id) for r in records}
    for q in report.quarantined:
        if (q.slot, q.instance_id) not in recorded:  # configure failure, unreachable host: no gate ran
            cases.append(TestCase(suite=ROLLOUT_SUITE, classname=f"rollout.{q.slot}", name=f"node.{q.instance_id}",
                                  status=CaseStatus.FAIL, failure_type="QUARANTINE",
                                  message=f"{q.reason_code}: {q.reason}"))
    ok = report.status == "complete"
    cases.append(TestCase(suite=ROLLOUT_SUITE, classname="rollout", name=f"target.{report.stack}",
                          status=CaseStatus.PASS if ok else CaseStatus.FAIL, failure_type="" if ok else report.status,
                          message="" if ok else report.halt_reason or f"{len(report.short)} slot(s) short"))
    return cases


def _schedule_name(r: RolloutReport) -> str:
    if r.timeline.get("windowed_s") is not None:
        return "windowed (post-canary batches in flight together; late tracks after each batch's first pass)"
    return "pipelined" if r.pipelining else "sequential"


def time_to_pool(t: Mapping[str, Any], sched: str) -> str:
    """The modelled figure, the one-batch-at-a-time figures of the same durations, and the lower
    bound with what it assumes and which of its two terms binds."""
    if t.get("windowed_s") is None:
        return (f"{duration(t[sched + '_s'])} ({sched}; sequential {duration(t['sequential_s'])}, "
                f"pipelined {duration(t['pipelined_s'])}, lower bound {duration(t['lower_bound_s'])})")
    w = t["window"]
    fabric = "n/a: the fabric budget is a chosen setting" if t.get("bound_fabric_s") is None else \
        duration(t["bound_fabric_s"])
    # a rollout that halted before any batch ran (an acceptance stage failed) has no bound yet
    ratio = f"{t['windowed_s'] / t['lower_bound_s']:.2f}x" if t["lower_bound_s"] else "no ratio to"
    return (f"{duration(t['windowed_s'])} with up to {w['batches']} batches in flight after the canary and "
            f"{w['fabric_tests']} concurrent fabric tests ({ratio} the lower "
            f"bound {duration(t['lower_bound_s'])}, bound ({t['binds']}) binds: (a) acceptance stages + the canary's "
            f"path + the longest other batch's path = {duration(t['bound_paths_s'])}; (b) acceptance stages + the "
            f"canary's path + every other batch's multi-node test time / {w['fabric_tests']} = {fabric}); "
            f"one batch at a time: pipelined {duration(t['pipelined_s'])}, sequential {duration(t['sequential_s'])}")


def _summary(r: RolloutReport) -> list[SummaryItem]:
    sched = "pipelined" if r.pipelining else "sequential"
    t = r.timeline
    out = [SummaryItem(key="admitted", value=f"{number(r.admitted_nodes)}/{number(r.target_nodes)} nodes, "
                                             f"{number(r.admitted_gpus)}/{number(r.target_gpus)} GPUs ({r.instance_type})",
                       tone=Tone.GOOD if r.admitted_nodes >= r.target_nodes else Tone.WARNING),
           SummaryItem(key="spares used", value=f"{number(r.spares_used)} of {number(r.spare_nodes)}; "
                                                f"replacements: {number(len(r.replacements))}"),
           SummaryItem(key="modelled time-to-pool", value=time_to_pool(t, sched))]
    statuses = {a.status for a in r.acceptance}
    if statuses:
        tone = (Tone.BAD if "failed" in statuses else Tone.GOOD if statuses <= {"passed", NOT_APPLICABLE}
                else Tone.INFO)
        out.append(SummaryItem(key="acceptance", value=", ".join(f"{a.stage} {a.status}" for a in r.acceptance),
                               tone=tone))
    if r.wall_seconds is not None:
        out.append(SummaryItem(key="wall time of this run", value=f"{r.wall_seconds:.1f} s"))
    if r.halt_reason:
        out.insert(0, SummaryItem(key="halted", value=r.halt_reason, tone=Tone.BAD))
    return out


def acceptance_blocks(report: RolloutReport) -> list[Block]:
    """The stages' verdicts in one table, then each stage's checks (measured against its floor)."""
    rows: list[list[Cell]] = []
    for a in report.acceptance:
        took = f"{duration(a.seconds)} {a.timing}" if a.seconds is not None else ""
        what = a.figures or a.reason or (", ".join(f"`{c}`" for c in a.reason_codes) if a.reason_codes else "")
        earlier = "; ".join(f"attempt {e.attempt} rechecked ({e.recheck})" if e.recheck
                            else f"attempt {e.attempt} failed ({', '.join(e.reason_codes)})" for e in a.earlier)
        rows.append([a.stage, a.status, a.verdict or "", a.attempts, took, what, earlier, a.bundle or ""])
    blocks: list[Block] = [Table(columns=["stage", "status", "verdict", "attempts", "time", "figures / reason codes",
                                          "earlier attempts", "bundle"], rows=rows,
                                 caption="Stack-level stages: storage and network base checks before the first "
                                         "GPU batch, the training smoke job after the canary.")]
    if all(a.status == "not-run" for a in report.acceptance):
        blocks.append(Paragraph(text="No acceptance stage has run in this rollout.", tone=Tone.WARNING))
    for a in report.acceptance:
        if not a.checks:
            continue
        note = f" (verdict converted from {a.imported_from})" if a.imported_from else ""
        blocks.append(Table(title=f"{a.stage}: {a.status}, attempt {a.attempts}{note}",
                            columns=["check", "measured", "floor / expected", "verdict", "reason code", "detail"],
                            rows=[[c.check_id, c.measured, c.expected, c.verdict.value, c.reason_code or "",
                                   c.message] for c in a.checks]))
    return blocks


def rollout_document(report: RolloutReport, records: Sequence[AdmissionRecord]) -> Document:
    r = report
    batches: list[Block] = [Table(columns=["batch", "stage", "nodes", "admitted", "quarantined", "first-pass failure rate",
                                           "reason"],
                                  rows=[[f"{b.number}{' (canary)' if b.canary else ''}", b.stage, b.nodes, b.admitted,
                                         b.quarantined, f"{b.first_failure_rate:.0%}", b.reason] for b in r.batches])]
    spans = timeline_spans(r)
    if spans:
        batches.append(Timeline(title="Rollout timeline per batch and stage", spans=spans,
                                caption=f"Modelled {_schedule_name(r)} schedule. "
                                        + TIMELINE_NOTE))
    sections = [
        Section(title="Acceptance", blocks=acceptance_blocks(r)),
        Section(title="Partitions", blocks=[Table(columns=["partition", "units available", "GPUs"], rows=[
            [p.name, f"{p.units_available}/{p.units_planned}", p.gpus_available] for p in r.partitions])]),
        Section(title="Batches", blocks=batches),
    ]
    busbw: list[Block] = [*busbw_charts(records)]
    heat = pair_heat_map(records)
    if heat is not None:
        busbw.append(heat)
    if busbw:
        sections.append(Section(title="Busbw", blocks=busbw))
    rows: list[list[Cell]] = [[q.slot, q.instance_id, q.batch,
                               f"`{q.reason_code}`" + (" (blacklisted)" if q.blacklisted else ""), q.reason,
                               q.replaced] for q in r.quarantined]
    sections.append(Section(title="Quarantined", blocks=[
        Table(columns=["slot", "instance", "batch", "reason", "detail", "replaced"], rows=rows) if rows
        else Paragraph(text="No node quarantined.", tone=Tone.GOOD)]))
    if r.link_faults:
        sections.append(Section(title="Link faults (escalate; no node quarantined)", blocks=[
            Table(columns=["node", "node"], rows=[[a, b] for a, b in r.link_faults])]))
    if r.short:
        sections.append(Section(title=f"Short of target: {len(r.short)} slot(s) without an admitted node", blocks=[
            Table(columns=["slot"], rows=[[s] for s in r.short])]))
    sections.append(Section(title="Checks", blocks=[TestCases(title="Checks per node and the rollout's target",
                                                              cases=rollout_cases(r, records))]))
    return Document(kind="rollout", title=f"Rollout of `{r.stack}`: {r.status}", stack=r.stack,
                    generated_at=r.generated_at, status=_STATUS.get(r.status, Status.ERROR), summary=_summary(r),
                    sections=sections, gpufleet_version=r.gpufleet_version)
