"""Fixed documents for the renderer tests: every block kind, hostile text, all case statuses."""

from __future__ import annotations

from datetime import datetime, timezone

from gpufleet.reports.document import (Bar, BarChart, CaseStatus, Distribution, DistributionGroup, Document, HeatCell,
                                    HeatMap, LineHistory, Paragraph, Section, Series, Span, Status, SummaryItem, Table,
                                    TestCase, TestCases, Timeline, Tone, ValueCount)

WHEN = datetime(2026, 7, 14, 12, 0, tzinfo=timezone.utc)
NODES = [f"node-{i:02d}" for i in range(6)]
BUSBW = [482.5, 479.0, 301.25, 481.0, None, 478.5]


def sample_document() -> Document:
    """Six nodes: one under the floor, one unmeasured, a failing pair, mixed driver versions."""
    return Document(
        kind="sample", title="Sample <report> | gpufleet", stack="local", generated_at=WHEN, status=Status.FAILED,
        summary=[SummaryItem(key="nodes", value="6"), SummaryItem(key="admitted", value="4", tone=Tone.GOOD),
                 SummaryItem(key="quarantined", value="1 (node-02)", tone=Tone.BAD)],
        sections=[
            Section(title="Busbw", blocks=[
                BarChart(title="Intra-node busbw", unit="GB/s", floor=430.0, caption="NCCL all_reduce_perf, 8 GPUs.",
                         bars=[Bar(label=n, value=v, note="quarantine" if n == "node-02" else "")
                               for n, v in zip(NODES, BUSBW)]),
                HeatMap(title="Pair busbw", unit="GB/s", row_labels=NODES, col_labels=NODES, floor=300.0,
                        cells=[HeatCell(row=0, col=1, value=385.0), HeatCell(row=1, col=0, value=384.5),
                               HeatCell(row=2, col=3, value=120.0), HeatCell(row=3, col=2, value=118.0),
                               HeatCell(row=5, col=4, value=380.0)]),
            ]),
            Section(title="Rollout", blocks=[
                Timeline(title="Batches", spans=[
                    Span(lane="batch 0 (canary)", stage="provision", start=0, end=420),
                    Span(lane="batch 0 (canary)", stage="configure", start=420, end=1260),
                    Span(lane="batch 0 (canary)", stage="gates", start=1260, end=1500),
                    Span(lane="batch 1", stage="provision", start=1500, end=2100),
                    Span(lane="batch 1", stage="configure", start=2100, end=3000),
                    Span(lane="batch 1", stage="gates", start=3000, end=3900.5)]),
                LineHistory(title="Baseline busbw per block", unit="GB/s", floor=350.0,
                            runs=["2026-07-01", "2026-07-07", "2026-07-14"],
                            series=[Series(name="block 0", values=[380.0, 382.5, 381.0]),
                                    Series(name="block 1", values=[379.0, None, 341.0])]),
            ]),
            Section(title="Versions", blocks=[
                Distribution(title="Installed versions", groups=[
                    DistributionGroup(name="nvidia-driver", expected="580.95.05",
                                      counts=[ValueCount(value="580.95.05", count=5),
                                              ValueCount(value="570.172.08", count=1)]),
                    DistributionGroup(name="efa-installer", expected="1.43.2",
                                      counts=[ValueCount(value="1.43.2", count=6)]),
                    DistributionGroup(name="kernel", counts=[ValueCount(value="6.8.0-1031-aws", count=6)])]),
                Table(title="Nodes", columns=["slot", "instance", "busbw", "admitted"],
                      rows=[[n, f"i-{i:017x}", v, v is not None and v >= 430] for i, (n, v) in
                            enumerate(zip(NODES * 2, BUSBW * 2))],
                      caption="Twelve rows: folded in Markdown."),
                Paragraph(text="Pipes | stars * underscores _ <script>alert(1)</script> & a\x07bell\nsecond line ✓ `busbw-low|<x>` and a lone ` backtick",
                          tone=Tone.WARNING),
            ]),
            Section(title="Checks", blocks=[TestCases(title="Gates", cases=[
                TestCase(suite="gpufleet-gate", classname="gate.node-00", name="nccl.intra", status=CaseStatus.PASS),
                TestCase(suite="gpufleet-gate", classname="gate.node-02", name="nccl.intra", status=CaseStatus.FAIL,
                         failure_type="QUARANTINE", message="busbw-low: 301.25 < 430 GB/s",
                         details="measured: 301.25\nexpected: >= 430 <GB/s> & \"quoted\"\x00"),
                TestCase(suite="gpufleet-gate", classname="gate.node-04", name="nccl.intra", status=CaseStatus.ERROR,
                         failure_type="no-facts", message="host unreachable", seconds=30.0),
                TestCase(suite="gpufleet-audit", name="node-05.kernel", status=CaseStatus.SKIP,
                         message="not pinned by the BOM"),
                TestCase(suite="gpufleet-gate", classname="gate.node-01", name="xid", status=CaseStatus.PASS,
                         output="WARN xid-13: Xid 13 seen once", seconds=0.25)])]),
            Section(title="Empty"),
        ])
