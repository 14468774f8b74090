"""The cost report as the shared `Document`, so Markdown, HTML and JUnit come from the renderers.

Why long lists are cut here: a month on 1,250 nodes is tens of thousands of jobs; the rendered
report shows the largest (`TOP`) and says so, and cost.json keeps every row.
"""

from __future__ import annotations

from gpufleet.cost.report import CostReport, Group, JobRow
from gpufleet.reports.document import (Bar, BarChart, CaseStatus, Cell, Document, Paragraph, Section, Status,
                                    SummaryItem, Table, TestCase, TestCases, Tone)

TOP = 50


def _usd(v: float | None) -> str:
    return "no price" if v is None else f"${v:,.2f}"


def _hours(v: float | None) -> str:
    return "unknown" if v is None else f"{v:,.1f}"


def _groups(title: str, groups: list[Group]) -> list:
    if not groups:
        return [Paragraph(text=f"No GPU usage by {title} in the window.")]
    return [Table(title=f"By {title}", columns=[title, "jobs", "GPU-hours", "cost (USD)"],
                  rows=[[g.name, g.jobs, g.gpu_hours, g.cost_usd] for g in groups]),
            BarChart(title=f"GPU-hours by {title}", unit="GPU-h",
                     bars=[Bar(label=g.name, value=g.gpu_hours) for g in groups[:TOP]])]


def _job_rows(rows: list[JobRow]) -> list[list[Cell]]:
    return [[r.job_id, r.name, r.team, r.partition, r.gpus, r.start.isoformat(timespec="seconds"),
             r.end.isoformat(timespec="seconds") if r.end else "running", r.gpu_hours, r.cost_usd, r.util_percent]
            for r in rows[:TOP]]


JOB_COLUMNS = ["job", "name", "team", "partition", "GPUs", "start", "end", "GPU-hours", "cost (USD)", "GPU util %"]


def cost_document(report: CostReport) -> Document:
    p = report.price
    summary = [SummaryItem(key="window", value=f"{report.window_start.isoformat(timespec='minutes')} to "
                                              f"{report.window_end.isoformat(timespec='minutes')}"),
               SummaryItem(key="GPU-hours", value=_hours(report.gpu_hours),
                           tone=Tone.BAD if report.gpu_hours is None else Tone.INFO),
               SummaryItem(key="cost", value=_usd(report.cost_usd), tone=Tone.BAD if report.cost_usd is None else Tone.INFO),
               SummaryItem(key="idle admitted units", value=f"{len(report.idle_units)} ({_hours(report.idle_hours_total)} h, "
                                                            f"{_usd(report.idle_cost_usd)})",
                           tone=Tone.WARNING if report.idle_units else Tone.GOOD),
               SummaryItem(key="low-utilisation jobs", value=str(len(report.low_util_jobs)),
                           tone=Tone.WARNING if report.low_util_jobs else Tone.GOOD),
               SummaryItem(key="quarantined nodes", value=f"{len(report.quarantined)} ({_usd(report.quarantined_cost_usd)})")]
    if report.admitted_gpu_hours:
        share = None if report.gpu_hours is None else report.gpu_hours / report.admitted_gpu_hours
        summary.append(SummaryItem(key="allocated share of admitted capacity",
                                   value="unknown" if share is None else f"{share:.0%}"))
    sections: list[Section] = []
    if report.problems or report.missing_price:
        sections.append(Section(title="Incomplete", blocks=[Paragraph(text=t, tone=Tone.BAD) for t in
                                                           [*report.problems, *([report.missing_price] if report.missing_price else [])]]))
    price_text = (f"{p.instance_type} {p.basis} in {p.region}: ${p.usd_per_instance_hour:,.3f} per instance-hour "
                  f"(${p.usd_per_gpu_hour:,.4f} per GPU-hour); source: {p.source}; dated: {p.dated}"
                  + (f"; {p.note}" if p.note else "") if p else report.missing_price or "no price")
    sections.append(Section(title="Price", blocks=[Paragraph(text=price_text, tone=Tone.INFO if p else Tone.BAD)]))
    sections.append(Section(title="By partition", blocks=_groups("partition", report.by_partition)))
    sections.append(Section(title="By team", blocks=_groups("team", report.by_team)))
    jobs_blocks: list = [Table(title="Jobs by GPU-hours", columns=JOB_COLUMNS, rows=_job_rows(report.jobs),
                               caption=f"the largest {min(TOP, len(report.jobs))} of {len(report.jobs)}; cost.json has all")]
    if report.skipped:
        jobs_blocks.append(Paragraph(text=f"{len(report.skipped)} allocation(s) not counted: "
                                          + "; ".join(report.skipped[:10]) + (" ..." if len(report.skipped) > 10 else ""),
                                     tone=Tone.WARNING))
    sections.append(Section(title="Jobs", blocks=jobs_blocks))
    if report.idle_unavailable:
        idle_blocks: list = [Paragraph(text=f"Idle units not computed: {report.idle_unavailable}", tone=Tone.WARNING)]
    elif report.idle_units:
        idle_blocks = [Table(title="Admitted units with no job on any of their nodes",
                             columns=["unit", "partition", "nodes", "GPUs", "idle hours", "longest idle (h)", "stretches",
                                      "cost (USD)"],
                             rows=[[u.unit, u.partition, ", ".join(u.slots), u.gpus, u.idle_hours, u.longest_idle_hours,
                                    u.stretches, u.cost_usd] for u in report.idle_units[:TOP]],
                             caption=f"{len(report.idle_units)} unit(s) idle at least once")]
    else:
        idle_blocks = [Paragraph(text="No admitted unit sat idle long enough to count.", tone=Tone.GOOD)]
    sections.append(Section(title="Idle admitted units", blocks=idle_blocks))
    low_blocks: list = [Paragraph(text=f"Utilisation: {report.utilisation}.")]
    if report.low_util_jobs:
        low_blocks.append(Table(title=f"Jobs below {report.low_util_percent:g}% GPU utilisation", columns=JOB_COLUMNS,
                                rows=_job_rows(report.low_util_jobs)))
    sections.append(Section(title="Low utilisation", blocks=low_blocks))
    sections.append(Section(title="Quarantined nodes", blocks=[
        Table(columns=["node", "hours quarantined", "cost (USD)"], rows=[[q.slot, q.hours, q.cost_usd] for q in report.quarantined])
        if report.quarantined else Paragraph(text="No node was quarantined in the window.", tone=Tone.GOOD)]))
    sections.append(Section(title="Checks", blocks=[TestCases(title="Sources", cases=_cases(report))]))
    status = Status.OK if report.complete else Status.ERROR
    return Document(kind="cost", title=f"Cost of {report.stack}: {_hours(report.gpu_hours)} GPU-hours, {_usd(report.cost_usd)}",
                    stack=report.stack, generated_at=report.generated_at, status=status, summary=summary, sections=sections)


def _cases(report: CostReport) -> list[TestCase]:
    """What JUnit shows: each source read (or not), and the price."""
    cases = [TestCase(suite="cost", name=f"source: {t.split(':')[0]}", status=CaseStatus.ERROR, message=t)
             for t in report.problems]
    if report.gpu_hours is not None:
        cases.append(TestCase(suite="cost", name="job accounting", status=CaseStatus.PASS,
                              output=f"{len(report.jobs)} job(s), {report.gpu_hours} GPU-hours"))
    cases.append(TestCase(suite="cost", name="price", status=CaseStatus.PASS if report.price else CaseStatus.ERROR,
                          message=report.missing_price or ""))
    return cases
