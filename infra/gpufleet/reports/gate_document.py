"""Admission records -> a report Document: the busbw chart against the floor, the pair heat map,
the nodes not admitted, and one JUnit test case per node and check.

Why from records only: the records are what the gate decided and what the journal stores, so the
`gate` command and the rollout report draw the same chart from the same data.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from collections.abc import Sequence

from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.verdict import Action, CheckResult, Verdict
from gpufleet.reports.document import (Bar, BarChart, CaseStatus, Cell, Document, HeatCell, HeatMap, Paragraph,
                                    Section, Status, SummaryItem, Table, TestCase, TestCases, Tone)
from gpufleet.reports.render.junit import render_cases
from gpufleet.reports.render.text import number

GATE_SUITE = "gpufleet-gate"
RING_PREFIX = "ring:"  # multi_node_gbs keys of ring runs; every other key is a partner node


def gate_cases(records: Sequence[AdmissionRecord], suite: str = GATE_SUITE) -> list[TestCase]:
    """One case per node and check. REMEDIATE and QUARANTINE fail (the node is not admitted);
    a WARN passes with the warning as system-out (a warned node is admitted)."""
    return [check_case(c, suite, f"gate.{r.slot}") for r in records for c in r.checks]


def gate_junit(records: Sequence[AdmissionRecord], suite: str = GATE_SUITE) -> str:
    """JUnit XML of the records' checks (`gpufleet gate --out`'s junit.xml), so CI shows failed gates natively."""
    return render_cases(gate_cases(records, suite), suite)


def check_case(c: CheckResult, suite: str, classname: str) -> TestCase:
    """One check as a JUnit case: REMEDIATE and QUARANTINE fail, a WARN passes with system-out."""
    failed = c.verdict.blocks_admission
    return TestCase(
        suite=suite, classname=classname, name=c.check_id,
        status=CaseStatus.FAIL if failed else CaseStatus.PASS,
        failure_type=c.verdict.value if failed else "",
        message=f"{c.reason_code}: {c.message}" if failed else "",
        details=f"measured: {c.measured}\nexpected: {c.expected}\nref: {c.research_ref}" if failed else "",
        output=(f"WARN {c.reason_code}: {c.message} (measured {c.measured}, expected {c.expected})"
                if c.verdict is Verdict.WARN else ""))


def _floor(records: Sequence[AdmissionRecord]) -> tuple[float | None, str]:
    """The floor drawn for these records, and a caption line when their floors differ."""
    floors = Counter(r.busbw.intra_node_floor_gbs for r in records if r.busbw.intra_node_floor_gbs is not None)
    if not floors:
        return None, ""
    if len(floors) == 1:
        return next(iter(floors)), ""
    return min(floors), f"Floors differ between nodes ({', '.join(number(f) for f in sorted(floors))} GB/s); " \
                        f"the lowest is drawn."


def busbw_charts(records: Sequence[AdmissionRecord]) -> list[BarChart]:
    """One bar chart of intra-node busbw per instance type (floors differ between types)."""
    by_type: dict[str, list[AdmissionRecord]] = {}
    for r in records:
        by_type.setdefault(r.instance_type, []).append(r)
    charts = []
    for itype, recs in by_type.items():
        floor, note = _floor(recs)
        medians = {r.busbw.cohort_median_gbs for r in recs if r.busbw.cohort_median_gbs is not None}
        caption = " ".join(x for x in (
            note, f"Cohort median {number(min(medians))} GB/s." if len(medians) == 1 else "") if x)
        charts.append(BarChart(
            title=f"Intra-node all-reduce busbw per node ({itype})", unit="GB/s", floor=floor,
            floor_label="floor", caption=caption,
            bars=[Bar(label=r.slot, value=r.busbw.intra_node_gbs,
                      note="" if r.action is Action.ADMIT else r.action.value) for r in recs]))
    return charts


def pair_heat_map(records: Sequence[AdmissionRecord]) -> HeatMap | None:
    """Pair busbw between nodes (each record's partner figures), or None when no pair ran."""
    pairs = {(r.slot, partner): v for r in records for partner, v in r.busbw.multi_node_gbs.items()
             if not partner.startswith(RING_PREFIX)}
    if not pairs:
        return None
    labels = sorted({n for pair in pairs for n in pair})
    index = {n: i for i, n in enumerate(labels)}
    return HeatMap(title="Multi-node pair busbw", unit="GB/s", row_labels=labels, col_labels=labels,
                   cells=[HeatCell(row=index[a], col=index[b], value=v) for (a, b), v in sorted(pairs.items())],
                   caption="Row: the node gated; column: its partner. Hatched: pair not run.")


def gate_document(records: Sequence[AdmissionRecord], title: str = "Gate", suite: str = GATE_SUITE,
                  now: datetime | None = None) -> Document:
    """The gate report. `now` defaults to the latest decision time, so equal records give equal bytes."""
    actions = Counter(r.action for r in records)
    stacks = sorted({r.stack for r in records if r.stack})
    generated = now or max((r.decided_at for r in records), default=datetime.now(timezone.utc))
    quarantined = actions[Action.QUARANTINE]
    summary = [SummaryItem(key="nodes", value=number(len(records))),
               SummaryItem(key="admitted", value=number(actions[Action.ADMIT]),
                           tone=Tone.GOOD if actions[Action.ADMIT] == len(records) else Tone.INFO),
               SummaryItem(key="retest", value=number(actions[Action.RETEST]),
                           tone=Tone.WARNING if actions[Action.RETEST] else Tone.INFO),
               SummaryItem(key="quarantined", value=number(quarantined), tone=Tone.BAD if quarantined else Tone.INFO)]
    digests = sorted({r.bom_digest for r in records})
    if digests:
        summary.append(SummaryItem(key="BOM", value=", ".join(d[:12] for d in digests)))
    sections = [Section(title="Busbw", blocks=[*busbw_charts(records), *filter(None, [pair_heat_map(records)])])]
    rings: list[list[Cell]] = [[r.slot, k, v] for r in records for k, v in sorted(r.busbw.multi_node_gbs.items())
             if k.startswith(RING_PREFIX)]
    if rings:
        sections[0].blocks.append(Table(title="Ring busbw", columns=["node", "ring", "busbw (GB/s)"], rows=rings))
    blocked = [r for r in records if r.action is not Action.ADMIT]
    rows: list[list[Cell]] = [[r.slot, r.instance_id, r.action.value, r.verdict.value, ", ".join(r.reason_codes),
                               r.message] for r in blocked]
    sections.append(Section(title="Nodes not admitted", blocks=[
        Table(columns=["slot", "instance", "action", "verdict", "reasons", "message"], rows=rows) if rows
        else Paragraph(text=f"All {number(len(records))} nodes admitted.", tone=Tone.GOOD)]))
    sections.append(Section(title="Checks", blocks=[TestCases(title="Checks per node", cases=gate_cases(records, suite))]))
    return Document(kind="gate", title=f"{title}: {number(len(records))} nodes, {number(quarantined)} quarantined",
                    stack=stacks[0] if len(stacks) == 1 else None, generated_at=generated,
                    status=Status.FAILED if quarantined else Status.OK, summary=summary, sections=sections)
