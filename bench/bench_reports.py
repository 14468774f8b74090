"""Benchmark the report renderers: a 1,250-node report (10,000 GPUs) in every format, against a
16-node report rendered in the same run.

The document is what `gpufleet gate` and the rollout report produce at that size: admission
records with ~20 checks per node (25,000 JUnit cases), the busbw bar chart, a pair heat map with
four partners per node (aggregated to blocks in HTML), plus the rollout timeline, the version
distribution and a baseline history per block of 16 nodes over 12 runs (block 7 regressed in the last).

Run: python bench/bench_reports.py [--nodes 1250] [--small 16] [--budget 5] [--runs 3]. Prints, min
and median over the runs: building the document from the records (the adapter's cost, paid once
whatever the formats), seconds per format rendered alone, output sizes, and the total of building
and rendering every format, with the ratio to the small report; exits 1 when the large report's
total takes longer than the budget (the issue's bound: 5 s for all formats).
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from _measure import Timing, counted, measured, timed  # noqa: E402

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
    recs = records(nodes, seed)
    return build_document(recs, seed), recs


def build_document(recs: list[AdmissionRecord], seed: int = 7) -> Document:
    """What `gpufleet gate` and the rollout report build before any renderer runs: the gate document
    of the records, plus the rollout timeline, version distribution and baseline history at that size."""
    rng = random.Random(seed)
    nodes = len(recs)
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
    return doc.model_copy(update={"sections": [*doc.sections, extra]})


def render_timings(doc: Document, recs: list[AdmissionRecord], runs: int = 1) -> dict[str, Timing]:
    """Each format rendered alone, `runs` times (so the split is visible); `.result` is the text."""
    return {fmt: timed(lambda: render_all(doc, recs, [fmt])[fmt], runs=runs) for fmt in FORMATS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1250)
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--budget", type=float, default=5.0,
                    help="seconds allowed for building the large report and rendering all its formats")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each step")
    args = ap.parse_args(argv)
    totals = {}
    measured(f"min / median over {args.runs} run{'s' if args.runs > 1 else ''} of each step; total = building the document + every format "
             "(sum of the mins)")
    for n in (args.small, args.nodes):
        recs = records(n)
        built = timed(lambda: build_document(recs), runs=args.runs)
        doc = built.result
        rendered = render_timings(doc, recs, args.runs)
        render_s = sum(t.min_s for t in rendered.values())
        totals[n] = built.min_s + render_s
        counted(f"{n:>6} nodes ({len(doc.test_cases()):,} JUnit cases): " + ", ".join(
            f"{f} {len(t.result.encode('utf-8')) / 1024:,.0f} KiB" for f, t in rendered.items()))
        measured(f"{n:>6} nodes: building the document {built.wall()}; " + ", ".join(
            f"{f} {t.min_s:.3f} / {t.median_s:.3f} s" for f, t in rendered.items())
            + f"; all formats {render_s:.3f} s; total {totals[n]:.3f} s")
    small, large = totals[args.small], totals[args.nodes]
    measured(f"ratio {args.nodes} / {args.small} nodes: {large / small:.1f}x the total for {args.nodes / args.small:.1f}x "
             "the nodes (both totals measured here)")
    ok = large <= args.budget
    measured(f"{'within' if ok else 'OVER'} the budget of {args.budget:g} s for {args.nodes} nodes (total {large:.3f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
