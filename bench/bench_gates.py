"""Benchmark the gates: read + parse + decide 1,250 nodes' bundles, serial and in parallel worker
processes side by side, and isolation vs naive all-pairs.

Run: python bench/bench_gates.py [--nodes 1250] [--repeat 3] [--quick]. Prints figures and ratios
measured in this run (the machine may be shared: compare the ratios, not the seconds, between
runs); isolation's rounds and runs are counts, the same on every machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from _measure import counted, measured, modelled, timed  # noqa: E402

from gpufleet.bom import load_bom  # noqa: E402
from gpufleet.gates import bundle as B, synth, versions  # noqa: E402
from gpufleet.gates.evaluate import default_workers, gate_cohort, gate_folders  # noqa: E402
from gpufleet.gates.isolation import isolate  # noqa: E402
from gpufleet.gates.settings import GateSettings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = GateSettings(expected_by_os=versions.expectations_by_os(load_bom(ROOT / "images" / "bom.yaml")))

FAULTS = sorted(synth.FAULTS)
_WHEN = datetime(2026, 7, 14, tzinfo=timezone.utc)


def make_bundles(root: Path, n: int, fault_rate: float = 0.03, seed: int = 7) -> list[Path]:
    rng = random.Random(seed)
    for i in range(n):
        faults = frozenset({rng.choice(FAULTS)}) if rng.random() < fault_rate else frozenset()
        xids = (rng.choice((79, 48, 119, 13)),) if rng.random() < fault_rate / 2 else ()
        synth.write_node(root / f"node-{i:04d}", synth.NodeSpec(slot=f"node-{i:04d}", faults=faults, xids=xids,
                                                               intra_busbw=rng.gauss(480, 4)))
    return B.find_bundles(root)


def gate_folder(root: Path) -> tuple[float, float, int, int]:
    """The serial path in two parts, one run each: (read seconds, decide seconds, nodes, quarantined)."""
    read = timed(lambda: [B.read_bundle(p) for p in B.find_bundles(root)])
    decide = timed(lambda: gate_cohort(read.result, SETTINGS, workers=1))
    records = decide.result
    return read.min_s, decide.min_s, len(records), sum(1 for r in records if r.action.value == "quarantine")


def serial_vs_parallel(root: Path, workers: int, repeat: int = 3) -> dict[str, float]:
    """Min and median of `repeat` runs of the whole gate (find + read + check + decide), serial then
    parallel, interleaved so that load on a shared machine hits both alike; the records must be identical."""
    folders = B.find_bundles(root)
    wall: dict[str, list[float]] = {"serial": [], "parallel": []}
    cpu: dict[str, list[float]] = {"serial": [], "parallel": []}
    dumps: dict[str, list] = {}
    for _ in range(repeat):
        for name, w in (("serial", 1), ("parallel", workers)):
            t = timed(lambda: gate_folders(B.find_bundles(root), SETTINGS, workers=w, decided_at=_WHEN))
            wall[name].append(t.min_s)
            cpu[name].append(t.cpu_min_s)
            dumps[name] = [r.model_dump() for r in t.result]
    assert dumps["serial"] == dumps["parallel"], "parallel records differ from serial ones"
    best = {name: min(v) for name, v in wall.items()}
    return {"nodes": len(folders), "workers": workers, **best, "speedup": best["serial"] / best["parallel"],
            "serial_median": statistics.median(wall["serial"]), "parallel_median": statistics.median(wall["parallel"]),
            "cpu_serial": min(cpu["serial"]), "cpu_parallel": min(cpu["parallel"]),
            "cpu_overhead": min(cpu["parallel"]) / min(cpu["serial"])}


def isolation_vs_all_pairs(n: int, bad: int, links: int, seed: int = 11) -> dict[str, float]:
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(n)]
    bad = min(bad, n // 8)
    bad_set = set(rng.sample(nodes, bad))
    healthy = [x for x in nodes if x not in bad_set]
    rng.shuffle(healthy)
    link_set = {tuple(sorted((healthy[2 * k], healthy[2 * k + 1]))) for k in range(min(links, len(healthy) // 2))}

    def fabric(groups):
        out = []
        for g in groups:
            adj = [tuple(sorted((g[i], g[(i + 1) % len(g)]))) for i in range(len(g))] if len(g) > 2 else [tuple(sorted(g))]
            out.append(120.0 if set(g) & bad_set or any(a in link_set for a in adj) else 400.0)
        return out

    r = isolate(nodes, ["a0", "a1"], fabric, 330.0)
    assert set(r.quarantined) == bad_set
    naive_runs = n * (n - 1) // 2
    naive_rounds = n - 1 if n % 2 == 0 else n  # round-robin tournament
    return {"nodes": n, "rounds": len(r.rounds), "runs": r.runs, "naive_rounds": naive_rounds, "naive_runs": naive_runs,
            "rounds_ratio": naive_rounds / len(r.rounds), "runs_ratio": naive_runs / r.runs}


FAULT_MIXES = ("bad nodes", "bad links", "one node, several bad links", "ring-only nodes", "bad nodes beside bad links")


def isolation_trial(n: int, rng: random.Random, few_rounds: bool = True) -> tuple[str, int, int, int, int]:
    """One random fault mix over n nodes (k <= 1% faults): (mix, rounds, healthy quarantined, faulty
    missed, runs). few_rounds=False: the one ring and its bisection for any batch (the old schedule).

    The fabric: a group containing a bad node, or whose ring crosses a bad link, runs slow; a
    ring-only node is fine in pairs and slows any ring of three or more (a fault pairs never show)."""
    nodes = [f"n{i}" for i in range(n)]
    k = rng.randint(1, max(1, n // 100))
    mix = rng.choice(FAULT_MIXES)
    healthy = list(nodes)
    rng.shuffle(healthy)
    bad: set[str] = set()
    links: set[tuple[str, ...]] = set()
    ring_only: set[str] = set()
    if mix in ("bad nodes", "bad nodes beside bad links"):
        bad, healthy = set(healthy[:k]), healthy[k:]
    if mix in ("bad links", "bad nodes beside bad links"):
        links |= {tuple(sorted((healthy[2 * j], healthy[2 * j + 1]))) for j in range(k)}
    if mix == "bad nodes beside bad links":
        links.add(tuple(sorted((sorted(bad)[0], healthy[-1]))))
    if mix == "one node, several bad links":
        links |= {tuple(sorted((healthy[0], healthy[j]))) for j in range(1, 2 + min(2, k))}
    if mix == "ring-only nodes":
        ring_only = set(healthy[:k])

    def fabric(groups):
        out = []
        for g in groups:
            edges = ({tuple(sorted((g[i], g[(i + 1) % len(g)]))) for i in range(len(g))} if len(g) > 2
                     else {tuple(sorted(g))})
            slow = set(g) & bad or edges & links or (len(g) > 2 and set(g) & ring_only)
            out.append(120.0 if slow else 400.0)
        return out

    r = isolate(nodes, ["a0", "a1"], fabric, 330.0, few_rounds=few_rounds)
    faulty = bad | ring_only
    return mix, len(r.rounds), len(set(r.quarantined) - faulty), len(faulty - set(r.quarantined)), r.runs


def isolation_trials(n: int, trials: int, seed: int = 21, few_rounds: bool = True) -> dict[str, dict[str, float]]:
    """Per fault mix over the same seeded trials: max/mean rounds, false quarantines, missed, mean runs."""
    rng = random.Random(seed)
    by: dict[str, list[tuple[int, int, int, int]]] = {m: [] for m in FAULT_MIXES}
    for _ in range(trials):
        mix, rounds, false, missed, runs = isolation_trial(n, rng, few_rounds)
        by[mix].append((rounds, false, missed, runs))
    return {m: {"trials": len(v), "max_rounds": max((x[0] for x in v), default=0),
                "mean_rounds": statistics.mean(x[0] for x in v) if v else 0.0,
                "false": sum(x[1] for x in v), "missed": sum(x[2] for x in v),
                "mean_runs": statistics.mean(x[3] for x in v) if v else 0.0} for m, v in by.items()}


def print_isolation_trials(n: int, trials: int) -> None:
    """The schedule isolate() picks (few rounds where the batch can lend partners) beside the old
    one ring and its bisection, over the same trials (same seed): rounds, runs, false quarantines."""
    t = timed(lambda: isolation_trials(n, trials))
    old = timed(lambda: isolation_trials(n, trials, few_rounds=False))
    counted(f"isolation at scale: {trials} random trials over {n} nodes, k <= 1% faults each (rounds: parallel "
            f"rounds of disjoint groups; goal <= 4 rounds, 0 healthy nodes quarantined); {t.wall()} "
            f"(old schedule {old.wall()})")
    counted(f"{'fault mix':<28} {'trials':>6} {'max rounds':>10} {'mean':>6} {'false quar.':>11} {'missed':>6} "
            f"{'mean runs':>9} | {'old: max rounds':>15} {'mean':>5} {'false':>5} {'missed':>6} {'mean runs':>9}")
    for mix, f in t.result.items():
        o = old.result[mix]
        counted(f"{mix:<28} {f['trials']:>6} {f['max_rounds']:>10} {f['mean_rounds']:>6.1f} {f['false']:>11} "
                f"{f['missed']:>6} {f['mean_runs']:>9.0f} | {o['max_rounds']:>15} {o['mean_rounds']:>5.1f} "
                f"{o['false']:>5} {o['missed']:>6} {o['mean_runs']:>9.0f}")
    worst = max(f["max_rounds"] for f in t.result.values())
    false = sum(f["false"] for f in t.result.values())
    missed = sum(f["missed"] for f in t.result.values())
    counted(f"goal <= 4 rounds: {'met' if worst <= 4 else 'MISSED'} (worst {worst}; old schedule "
            f"{max(f['max_rounds'] for f in old.result.values())}); 0 false quarantines: "
            f"{'met' if false == 0 else 'MISSED'} ({false}); missed faults: {missed}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1250)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each of serial and parallel")
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--quick", action="store_true", help="one timed run each")
    ap.add_argument("--trials", type=int, default=1000, help="random isolation trials at --nodes")
    ap.add_argument("--isolation-only", action="store_true", help="only the isolation trials")
    args = ap.parse_args(argv)
    if args.isolation_only:
        print_isolation_trials(args.nodes, args.trials)
        return 0
    repeat = 1 if args.quick else args.repeat
    with tempfile.TemporaryDirectory() as tmp:
        gen = timed(lambda: make_bundles(Path(tmp), args.nodes))
        read_s, decide_s, n, q = gate_folder(Path(tmp))
        sp = serial_vs_parallel(Path(tmp), args.workers, repeat)
    measured(f"bundles: generated {n} in {gen.wall()}")
    measured(f"gate {n} nodes, serial, 1 run: read {read_s:.3f} s + parse/decide {decide_s:.3f} s = "
             f"{read_s + decide_s:.3f} s")
    counted(f"gate {n} nodes: quarantined {q}")
    measured(f"gate {n} nodes over {repeat} interleaved runs each: serial min {sp['serial']:.3f} / median "
             f"{sp['serial_median']:.3f} s, {sp['workers']} workers min {sp['parallel']:.3f} / median "
             f"{sp['parallel_median']:.3f} s -> {sp['speedup']:.2f}x wall (min vs min; target <= 1 s: "
             f"{'met' if sp['parallel'] <= 1.0 else 'missed'}); records identical")
    measured(f"CPU seconds (all processes, min of {repeat}): serial {sp['cpu_serial']:.3f}, parallel "
             f"{sp['cpu_parallel']:.3f} -> {sp['cpu_overhead']:.2f}x the work ({os.getloadavg()[0]:.1f} load now)")
    modelled(f"on {sp['workers']} idle cores the parallel wall time would be about "
             f"{sp['cpu_parallel'] / sp['workers']:.3f} s (the measured CPU seconds / {sp['workers']})")
    for nb, nl in ((0, 0), (5, 2), (25, 5)):
        f = isolation_vs_all_pairs(args.nodes, nb, nl)
        counted(f"isolation n={f['nodes']} bad={nb} links={nl}: {f['rounds']} rounds / {f['runs']} runs vs all-pairs "
                f"{f['naive_rounds']} rounds / {f['naive_runs']} runs -> {f['rounds_ratio']:.0f}x fewer rounds, "
                f"{f['runs_ratio']:.0f}x fewer runs")
    print_isolation_trials(args.nodes, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
