"""The cost report for 1,250 nodes (10,000 GPUs) and a month of jobs.

Run: `python bench/bench_cost.py [--runs 3] [--quick]`. Synthetic but in the real formats: `sacct -a -X -P -n` lines
(jobs of 1 to 32 nodes, 10 minutes to 2 days, four teams, three partitions, a few running at the
end and a few pending array lines), the rollout journal's admission and quarantine events for
every slot of the plan, and a Prometheus query_range answer at the step the report would ask
for. Figures, with ratios to a baseline measured in the same run so they compare across machines:
- parse: the sacct text to allocations, against splitting its lines on `|` (the least any parser does);
- utilisation: the query_range JSON to per-node series, against `json.loads` of the same body;
- report: the pure report (prices, groups, idle units, low utilisation, quarantine) and its
  rendering to JSON, Markdown, JUnit and HTML, against the parse;
- peak traced memory of parse + report (a separate traced run), against the size of the sacct text.
Times are min and median over the runs (`--quick`: one run each).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from _measure import counted, measured, peak_traced, timed  # noqa: E402

from gpufleet.cost import prometheus, sacct  # noqa: E402
from gpufleet.cost.document import cost_document  # noqa: E402
from gpufleet.cost.pool_history import transitions  # noqa: E402
from gpufleet.cost.report import PriceUsed, UnitNodes, build  # noqa: E402
from gpufleet.cost.usage import Window  # noqa: E402
from gpufleet.pool.slurm.conf import hostlist  # noqa: E402
from gpufleet.reports.write import write_report  # noqa: E402

NODES = 1_250
GPUS = 8
START = datetime(2026, 11, 1, tzinfo=timezone.utc)
END = START + timedelta(days=30)
NOW = END
TEAMS = ("vision", "speech", "language", "robotics")
PARTITIONS = (("train", 900), ("sim", 250), ("debug", 100))  # nodes each
FMT = "%Y-%m-%dT%H:%M:%S"


def slot(i: int) -> str:
    return f"prod-b{i // 5:04d}-n{i:05d}"


def sacct_text(rng: random.Random) -> str:
    """Each partition's nodes in lanes of fixed width; each lane runs jobs back to back with gaps."""
    lines: list[str] = []
    job = 1000
    first = 0
    for name, nodes in PARTITIONS:
        width = {"train": 32, "sim": 4, "debug": 1}[name]
        for lane in range(first, first + nodes - width + 1, width):
            t = START - timedelta(hours=rng.uniform(0, 24))  # some jobs began before the window
            while t < END:
                length = timedelta(minutes=rng.uniform(10, 2880 if name == "train" else 600))
                end = t + length
                running = end >= END
                team = rng.choice(TEAMS)
                lines.append("|".join([str(job), f"{name}-{job}", team, name,
                                       f"billing={width * 96},cpu={width * 96},gres/gpu={width * GPUS},node={width}",
                                       t.strftime(FMT), "Unknown" if running else end.strftime(FMT),
                                       "00:00:00", "RUNNING" if running else "COMPLETED", hostlist([slot(n) for n in range(lane, lane + width)])]))
                job += 1
                t = end + timedelta(minutes=rng.uniform(0, 240))
        first += nodes
    for k in range(200):  # pending array tails: parsed, skipped
        lines.append(f"{job + k}_[1-50]|sweep|speech|debug||Unknown|Unknown|00:00:00|PENDING|None assigned")
    return "\n".join(lines) + "\n"


def journal_events(rng: random.Random) -> list[dict]:
    admitted = {"type": "nodes", "to": "admitted", "at": (START - timedelta(days=2)).isoformat(),
                "nodes": {slot(i): {} for i in range(NODES)}}
    quarantined = [{"type": "nodes", "to": "quarantined", "at": (START + timedelta(hours=rng.uniform(0, 700))).isoformat(),
                    "nodes": {slot(i): {"reason_code": "xid-79"}}} for i in rng.sample(range(NODES), 25)]
    return [admitted, *sorted(quarantined, key=lambda e: e["at"])]


def query_range_answer(rng: random.Random, step: float) -> str:
    t0, t1 = START.timestamp(), END.timestamp()
    points = int((t1 - t0) // step) + 1
    result = []
    for i in range(NODES):
        base = rng.uniform(5, 95)
        result.append({"metric": {"node": slot(i)},
                       "values": [[t0 + k * step, f"{min(100, max(0, base + rng.uniform(-5, 5))):.0f}"] for k in range(points)]})
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each step")
    ap.add_argument("--quick", action="store_true", help="one timed run of each step")
    args = ap.parse_args()
    runs = 1 if args.quick else args.runs
    rng = random.Random(14)
    text = sacct_text(rng)
    history = transitions(journal_events(rng), [])
    window = Window(START, END)
    step = prometheus.step_for(window.seconds, NODES)
    answer = query_range_answer(rng, step)
    units = [UnitNodes(unit=i, partition=None, slots=(slot(i),), gpus=GPUS) for i in range(NODES)]
    price = PriceUsed(instance_type="p5.48xlarge", basis="on-demand", region="us-east-1", usd_per_instance_hour=80.0,
                      usd_per_gpu_hour=10.0, source="bench", dated="bench")

    split = timed(lambda: [line.split("|") for line in text.splitlines()], runs=runs)
    parse = timed(lambda: sacct.parse(text), runs=runs)
    jobs, skipped = parse.result
    loads = timed(lambda: json.loads(answer), runs=runs)
    util = timed(lambda: prometheus.parse_matrix(json.loads(answer)), runs=runs)
    series = util.result

    def report(parsed):
        return build(stack="prod", pool="slurm", window=window, now=NOW, instance_type="p5.48xlarge", gpus_per_node=GPUS,
                     price=price, missing_price=None, jobs=parsed, skipped=[f"line {s.line}" for s in skipped],
                     units=units, history=history, history_note="", utilisation=series, utilisation_note="bench",
                     low_util_percent=30, min_idle_minutes=15, problems=[])

    built = timed(lambda: report(jobs), runs=runs)
    rep = built.result
    with tempfile.TemporaryDirectory() as tmp:
        render = timed(lambda: write_report(cost_document(rep), rep, Path(tmp), "cost"), runs=runs)
        sizes = {p.name: p.stat().st_size for p in Path(tmp).iterdir()}
    _, peak = peak_traced(lambda: report(sacct.parse(text)[0]))

    counted(f"input: {NODES} nodes, {len(jobs):,} jobs over 30 days ({len(text) / 1e6:.1f} MB of sacct lines, "
            f"{len(skipped)} pending skipped), {rep.gpu_hours:,.0f} GPU-hours of {rep.admitted_gpu_hours:,.0f} admitted")
    measured(f"parse: {parse.wall('ms')} = {parse.min_s / split.min_s:.1f}x splitting the lines "
             f"({split.wall('ms')}; min vs min)")
    measured(f"utilisation: {len(answer) / 1e6:.0f} MB query_range answer at a {step:.0f} s step parsed in "
             f"{util.wall('ms')} = {util.min_s / loads.min_s:.2f}x json.loads ({loads.wall('ms')}; min vs min)")
    measured(f"report: built in {built.wall('ms')} = {built.min_s / parse.min_s:.1f}x the parse (min vs min); "
             f"document built, rendered and written in {render.wall('ms')}")
    counted("report files: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items())))
    counted(f"found: {len(rep.idle_units)} idle units ({rep.idle_hours_total:,.0f} h), {len(rep.low_util_jobs):,} "
            f"low-utilisation jobs, {len(rep.quarantined)} quarantined nodes")
    measured(f"memory: peak traced {peak / 1e6:.0f} MB for parse + report (1 traced run) = "
             f"{peak / len(text):.1f}x the sacct text")


if __name__ == "__main__":
    main()
