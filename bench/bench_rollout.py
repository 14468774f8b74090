"""Benchmark the local (simulated) rollout: wall time and peak memory at 1,000 and 10,000 GPUs,
and the modelled time-to-pool (batches in flight together after the canary) beside its lower bound and
the one-batch-at-a-time figures over the same run's durations.

Run: python bench/bench_rollout.py [--sizes 16,1000,10000] [--quick]. Each size runs `gpufleet rollout`
once, in its own process (so peak RSS is that rollout's), on a throwaway project whose stack is
`local` scaled to the size (the same fault rate, partitions in the same shares). The Pulumi program
capture the simulator starts from is done once per size beforehand and reported separately
(bench/bench_program.py measures the program itself). Measured figures (wall time, peak RSS) are
printed as ratios against the 16-GPU rollout measured in the same run; the time-to-pool is the
simulator's clock (modelled), compared only with itself. Targets: 1,000 GPUs under 15 s, 10,000
under 120 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _measure import counted, measured, modelled, peak_rss_mib, timed  # noqa: E402

TARGETS = {1000: 15.0, 10000: 120.0}
RATIO_GOALS = {1000: 1.2, 10000: 1.3}  # modelled time-to-pool / its lower bound (issue 21)


def stack_for(gpus: int) -> dict:
    """`local` scaled to `gpus`: partitions by the same shares, faults at the same rate."""
    doc = yaml.safe_load((REPO / "stacks" / "Pulumi.local.yaml").read_text())
    cfg = doc["config"]
    scale = gpus / cfg["gpufleet:cluster"]["targetGpus"]
    cfg["gpufleet:cluster"].update(targetGpus=gpus, name=f"bench{gpus}")
    units = gpus // cfg["gpufleet:cluster"]["unitGpus"]
    parts = cfg["gpufleet:partitions"]
    total = sum(p["units"] for p in parts)
    shares = [max(1, round(p["units"] * units / total)) for p in parts]
    shares[0] += units - sum(shares)
    if shares[0] < 1 or gpus < 100:  # tiny: one partition
        parts[:] = [{**parts[0], "units": units, "quotaUnits": units}]
    else:
        for p, u in zip(parts, shares, strict=True):
            p.update(units=u, quotaUnits=u)
    sim = cfg["gpufleet:simulator"]
    if gpus < 100:
        sim.pop("faults", None), sim.pop("capacityShortfall", None)
        sim["badLinks"] = 0
    else:
        sim["faults"] = {k: max(1, round(v * scale)) for k, v in sim.get("faults", {}).items()}
        sim["badLinks"] = max(1, round(sim.get("badLinks", 0) * scale))
    return doc


def make_project(root: Path, gpus: int) -> str:
    root.mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("images", "playbooks"):
        (root / name).symlink_to(REPO / name)
    (root / "stacks").mkdir()
    stack = f"bench{gpus}"
    (root / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(stack_for(gpus), sort_keys=False))
    return stack


def one(project: Path, stack: str) -> None:
    """Child process: one rollout; prints wall seconds and peak RSS as JSON."""
    from click.testing import CliRunner

    from gpufleet.cli import main

    run = timed(lambda: CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", stack]))
    result, wall, peak_mib = run.result, run.min_s, peak_rss_mib()
    report = json.loads((project / "reports" / stack / "rollout.json").read_text())
    print(json.dumps({"exit": result.exit_code, "wall_s": wall, "peak_mib": peak_mib, "timeline": report["timeline"],
                      "status": report["status"], "admitted_gpus": report["admitted_gpus"],
                      "quarantined": len(report["quarantined"]), "batches": len(report["batches"])}))


def capture(project: Path, stack: str) -> float:
    """Warm the simulator's program cache (the real Pulumi program under mocks) for this stack."""
    code = ("import sys; from gpufleet.project import load_project; from gpufleet.spec import load_stack_path; "
            "from gpufleet.plan import plan_stack; from gpufleet.sim.cloud import SimulatedCloud; "
            "p = load_project(__import__('pathlib').Path(sys.argv[1])); s = load_stack_path(p.stack_file(sys.argv[2])); "
            "SimulatedCloud.open(s, plan_stack(s), p, sys.argv[2])")
    return timed(lambda: subprocess.run([sys.executable, "-c", code, str(project), stack], check=True, cwd=REPO)).min_s


def measure(gpus: int, work: Path) -> dict:
    project = work / f"p{gpus}"
    stack = make_project(project, gpus)
    captured = capture(project, stack)
    for leftover in ("journal.jsonl", "pool.json"):
        (project / ".gpufleet" / stack / leftover).unlink(missing_ok=True)
    out = subprocess.run([sys.executable, __file__, "--one", str(project), stack], check=True, cwd=REPO,
                         capture_output=True, text=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["capture_s"] = captured
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,1000,10000", help="GPU counts; the first is the baseline")
    ap.add_argument("--quick", action="store_true", help="16 and 1,000 GPUs only")
    ap.add_argument("--one", nargs=2, metavar=("PROJECT", "STACK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(Path(args.one[0]), args.one[1])
        return
    sizes = [16, 1000] if args.quick else [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        results = {g: measure(g, Path(tmp)) for g in sizes}
    base = results[sizes[0]]
    measured(f"one rollout per size (1 run each): wall time and peak RSS of its process, x = against the "
             f"{sizes[0]}-GPU rollout of this run; capture = the program capture beforehand (1 run)")
    measured(f"{'GPUs':>6} {'wall s':>8} {'x base':>7} {'peak MiB':>9} {'x base':>7} {'capture s':>9}")
    for g, r in results.items():
        measured(f"{g:>6} {r['wall_s']:>8.2f} {r['wall_s'] / base['wall_s']:>7.1f} {r['peak_mib']:>9.0f} "
                 f"{r['peak_mib'] / base['peak_mib']:>7.1f} {r['capture_s']:>9.1f}")
    counted(f"{'GPUs':>6} {'status':>9} {'admitted':>8} {'quar.':>5} {'batches':>7}")
    for g, r in results.items():
        counted(f"{g:>6} {r['status']:>9} {r['admitted_gpus']:>8} {r['quarantined']:>5} {r['batches']:>7}")
    modelled("time to pool on the simulator's clock (its per-stage durations), hours. windowed = post-canary "
             "batches in flight together within the plan's budget (the schedule the rollout ran); pipe./seq. = one "
             "batch at a time over the same run's durations; bound = max((a) acceptance + canary path + longest "
             "other batch's path, (b) acceptance + canary path + other batches' multi-node test time / fabric "
             "budget); ratio = modelled / bound")
    modelled(f"{'GPUs':>6} {'window':>6} {'fabric':>6} {'wind. h':>7} {'pipe. h':>7} {'seq. h':>7} {'bound h':>7} "
             f"{'binds':>5} {'wind./bound':>11} {'pipe./bound':>11} {'goal':>5}")
    for g, r in results.items():
        t = r["timeline"]
        w = t.get("window") or {"batches": 1, "fabric_tests": 1}
        used = t.get("windowed_s", t["pipelined_s"])
        bound = t["lower_bound_s"] or 1.0
        goal = RATIO_GOALS.get(g)
        verdict = "" if goal is None else ("met" if used / bound <= goal else "MISSED")
        modelled(f"{g:>6} {w['batches']:>6} {w['fabric_tests']:>6} {used / 3600:>7.2f} {t['pipelined_s'] / 3600:>7.2f} "
                 f"{t['sequential_s'] / 3600:>7.2f} {bound / 3600:>7.2f} {t.get('binds', 'a'):>5} "
                 f"{used / bound:>11.2f} {t['pipelined_s'] / bound:>11.2f} "
                 f"{'' if goal is None else f'<={goal}':>5} {verdict}")
    for g, limit in TARGETS.items():
        if g in results:
            ok = results[g]["wall_s"] < limit
            measured(f"target {g} GPUs < {limit:.0f} s: {'met' if ok else 'MISSED'} ({results[g]['wall_s']:.1f} s)")


if __name__ == "__main__":
    main()
