"""Benchmark the report renderers: a 1,250-node report (10,000 GPUs) in every format, against a
16-node report rendered in the same run.

The document is what `gpufleet gate` and the rollout report produce at that size: admission
records with ~20 checks per node (25,000 JUnit cases), the busbw bar chart, a pair heat map with
four partners per node (aggregated to blocks in HTML), plus the rollout timeline, the version
distribution and a baseline history per block of 16 nodes over 12 runs (block 7 regressed in the last).

Run: python bench/bench_reports.py [--nodes 1250] [--small 16] [--budget 5]. Prints seconds per
format, output sizes and the ratio to the small report; exits 1 when the large report takes longer
than the budget (the issue's bound: 5 s for all formats). Building the document from the records is
timed and printed apart: it is the adapter's cost, paid once whatever the formats.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpufleet.gates.admission import AdmissionRecord, BusbwFigures  # noqa: E402
from gpufleet.gates.verdict import Action, Verdict, check_result  # noqa: E402
from gpufleet.reports.document import (Distribution, DistributionGroup, Document, LineHistory, Section, Series,  # noqa: E402
                                    Span, Timeline, ValueCount)
from gpufleet.reports.gate_document import gate_document  # noqa: E402
from gpufleet.reports.write import FORMATS, render_all  # noqa: E402

WHEN = datetime(2026, 7, 14, 12, 0, tzinfo=timezone.utc)
CHECKS = [f"check.{i:02d}" for i in range(19)]
COMPONENTS = ["nvidia-driver", "cuda", "nccl", "aws-ofi-nccl", "efa-installer", "libfabric", "kernel", "dcgm",
              "fabricmanager", "gdrcopy", "nvidia-container-toolkit", "slurm"]
FLOOR = 430.0
REGRESSING_BLOCK = 7


def records(nodes: int, seed: int = 7) -> list[AdmissionRecord]:
    """Admission records for `nodes` nodes: ~2% under the floor, four pair partners each."""
    rng = random.Random(seed)
    names = [f"node-{i:04d}" for i in range(nodes)]
    out = []
    for i, slot in enumerate(names):
        low = rng.random() < 0.02
        busbw = rng.gauss(300, 20) if low else rng.gauss(480, 4)
        checks = [check_result(c, "Q", "ok", "ok", Verdict.PASS, research_ref="gates-research.md") for c in CHECKS]
        checks.append(check_result("nccl.intra", "Q", f"{busbw:.1f} GB/s", f">= {FLOOR:g} GB/s",
                                   Verdict.QUARANTINE if low else Verdict.PASS,
                                   "busbw-low" if low else None, "intra-node busbw under the floor" if low else "",
                                   "gates-research.md (d)"))
        partners = {names[(i + k) % nodes]: round(rng.gauss(385, 6), 1) for k in (1, 2, 4, 8) if nodes > k}
        out.append(AdmissionRecord(
            slot=slot, instance_id=f"i-{i:017x}", instance_type="p5.48xlarge", stack="prod", batch=i // 128,
            block=i // 16, bom_digest="sha256:0123456789abcdef", verdict=Verdict.QUARANTINE if low else Verdict.PASS,
            action=Action.QUARANTINE if low else Action.ADMIT, reason_codes=("busbw-low",) if low else (),
            checks=tuple(checks), decided_at=WHEN,
            busbw=BusbwFigures(intra_node_gbs=round(busbw, 2), intra_node_floor_gbs=FLOOR, cohort_median_gbs=480.0,
                               multi_node_gbs=partners)))
    return out


def fleet_document(nodes: int, seed: int = 7) -> tuple[Document, list[AdmissionRecord]]:
    """The gate document of `nodes` nodes plus the rollout and audit charts at that size."""
    rng = random.Random(seed)
    recs = records(nodes, seed)
    doc = gate_document(recs, title="Fleet", now=WHEN)
    spans, t = [], 0.0
    for b in range(max(1, -(-nodes // 128))):
        lane = "batch 0 (canary)" if b == 0 else f"batch {b}"
        for stage, mean in (("provision", 600), ("configure", 900), ("preflight", 240), ("gates", 420)):
            d = rng.uniform(0.8, 1.2) * mean
            spans.append(Span(lane=lane, stage=stage, start=round(t, 1), end=round(t + d, 1)))
            t += d
    groups = []
    for c in COMPONENTS:
        odd = sum(1 for _ in range(nodes) if rng.random() < 0.01)
        counts = [ValueCount(value="1.0.0", count=nodes - odd)] + ([ValueCount(value="0.9.9", count=odd)] if odd else [])
        groups.append(DistributionGroup(name=c, expected="1.0.0", counts=counts))
    runs = [(WHEN - timedelta(days=7 * k)).date().isoformat() for k in range(11, -1, -1)]
    series = [Series(name=f"block {b}", values=[round(rng.gauss(385, 3), 1) for _ in runs])
              for b in range(max(1, nodes // 16))]
    if len(series) > REGRESSING_BLOCK:  # one block regressed in the latest run
        s = series[REGRESSING_BLOCK]
        series[REGRESSING_BLOCK] = s.model_copy(update={"values": [*s.values[:-1], 338.0]})
    extra = Section(title="Rollout and versions", blocks=[
        Timeline(title="Rollout timeline", spans=spans),
        Distribution(title="Installed versions per component", groups=groups),
        LineHistory(title="Baseline busbw per block", unit="GB/s", runs=runs, series=series, floor=350.0)])
    return doc.model_copy(update={"sections": [*doc.sections, extra]}), recs


def render_seconds(doc: Document, recs: list[AdmissionRecord]) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds and bytes per format (each format rendered alone, so the split is visible)."""
    seconds, sizes = {}, {}
    for fmt in FORMATS:
        t0 = time.perf_counter()
        text = render_all(doc, recs, [fmt])[fmt]
        seconds[fmt] = time.perf_counter() - t0
        sizes[fmt] = len(text.encode("utf-8"))
    return seconds, sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1250)
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--budget", type=float, default=5.0, help="seconds allowed for all formats of the large report")
    args = ap.parse_args(argv)
    results = {}
    for n in (args.small, args.nodes):
        doc, recs = fleet_document(n)
        t0 = time.perf_counter()
        gate_document(recs, title="Fleet", now=WHEN)  # the adapter's share: records -> document
        adapt = time.perf_counter() - t0
        seconds, sizes = render_seconds(doc, recs)
        results[n] = seconds
        cases = len(doc.test_cases())
        print(f"{n:>6} nodes ({cases:,} JUnit cases): " + ", ".join(
            f"{f} {seconds[f]:.3f} s / {sizes[f] / 1024:,.0f} KiB" for f in FORMATS)
            + f"; all formats {sum(seconds.values()):.3f} s (building the document from the records: {adapt:.3f} s)")
    small, large = sum(results[args.small].values()), sum(results[args.nodes].values())
    print(f"ratio {args.nodes} / {args.small} nodes: {large / small:.1f}x for {args.nodes / args.small:.1f}x the nodes")
    ok = large <= args.budget
    print(f"{'within' if ok else 'OVER'} the budget of {args.budget:g} s for {args.nodes} nodes ({large:.3f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
