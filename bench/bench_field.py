"""Replay published failure mixes through the 1,000-GPU rollout and count what the gates catch.

Run: python bench/bench_field.py [--mixes llama3,crusoe] [--seeds 20] [--faulty-share 0.06].
Each (mix, seed) is one `gpufleet rollout` of the `local` stack (1,000 GPUs, p5.48xlarge) in a
throwaway project, its faults drawn from the mix (gpufleet.sim.field_mix: the published classes,
each mapped to the fault kinds a preflight meets, or to `latent` when no admission check can see
it). The seed's fleet has `--faulty-share` of its nodes faulty, one fault each; no bad links
and no capacity shortfall, so every miss is the gates'. Per class it prints (counted): injected
(first instances carrying the class), caught before pool entry (not admitted while the fault
was still there: quarantined, failed, or cleared by the remediation the gates asked for), missed
(admitted with the fault), and the healthy nodes quarantined; then recall over the classes
visible at admission, the latent ones apart, and the false-quarantine rate over healthy nodes.
Goals (issue 19): recall >= 0.95 on visible classes, false quarantines <= 0.5% of healthy nodes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _measure import counted, measured, timed  # noqa: E402

from gpufleet.sim.faults import FaultPlan, active_faults  # noqa: E402
from gpufleet.sim.field_mix import MIXES, draw, get_mix  # noqa: E402

STACK = "field"
WORKLOAD_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests@sha256:" + "5e" * 32


def stack_doc(kinds: Counter, seed: int) -> dict:
    doc = yaml.safe_load((REPO / "stacks" / "Pulumi.local.yaml").read_text())
    cfg = doc["config"]
    cfg["gpufleet:cluster"]["name"] = STACK
    cfg["gpufleet:simulator"] = {"seed": seed, "faults": dict(sorted(kinds.items())), "badLinks": 0,
                                 "systemic": "none"}
    return doc


def make_project(root: Path, doc: dict, program: Path | None) -> Path:
    root.mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("images", "playbooks"):
        (root / name).symlink_to(REPO / name)
    (root / "stacks").mkdir()
    (root / "stacks" / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    if program is not None:  # the Pulumi program's capture does not depend on the simulator's settings
        sim = root / ".gpufleet" / STACK / "sim"
        sim.mkdir(parents=True)
        shutil.copy(program, sim / "program.json")
    return root


def rollout(project: Path) -> int:
    from click.testing import CliRunner

    from gpufleet.cli import main

    res = CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", STACK])
    if not (project / "reports" / STACK / "rollout.json").exists():
        raise SystemExit(f"the rollout in {project} wrote no report (exit {res.exit_code}):\n{res.output[-3000:]}")
    return res.exit_code


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def outcomes(project: Path, classes_of: dict[str, list[str]]) -> dict:
    """Per class: injected, caught, missed; and healthy instances quarantined, of how many."""
    state = project / ".gpufleet" / STACK
    raw = json.loads((state / "sim" / "faults.json").read_text())
    plan = FaultPlan(faults=raw["faults"], bad_links=(), shortfall={}, bad_replacements=raw["bad_replacements"],
                     systemic=raw["systemic"])
    remedies = json.loads((state / "sim" / "remedies.json").read_text()) if (state / "sim" / "remedies.json").exists() else {}
    launched = {e["instance_id"]: (e["slot"], e["generation"]) for e in jsonl(state / "sim" / "ledger.jsonl")
                if e.get("event") == "launch"}
    report = json.loads((project / "reports" / STACK / "rollout.json").read_text())
    quarantined = {q["instance_id"] for q in report["quarantined"]}
    pool = json.loads((state / "pool.json").read_text())["nodes"]
    admitted = {n["instance_id"] for n in pool.values() if n.get("state") == "admitted"}
    # the slots carrying each kind get the kind's drawn classes in slot order (placement is seeded at random)
    class_of_slot = {}
    for kind, names in classes_of.items():
        slots = sorted(s for s, k in plan.faults.items() if k == kind)
        class_of_slot.update(zip(slots, names))
    per: dict[str, Counter] = defaultdict(Counter)
    healthy = healthy_quarantined = 0
    for instance, (slot, generation) in launched.items():
        kind = plan.fault_of(slot, generation)
        still = active_faults(kind, remedies.get(instance, ()))
        if generation == 0 and kind is not None:
            c = per[class_of_slot[slot]]
            c["injected"] += 1
            if instance in admitted:  # in the pool: with its fault (missed) or cleared by the remedy asked for
                outcome = "missed" if still is not None else "caught"
            else:  # held back by the gates, or never reached them (a rollout that stopped before its batch)
                outcome = "caught" if instance in quarantined else "not-reached"
            c[outcome] += 1
            if outcome == "missed":
                c["missed:" + kind] += 1
        elif kind is None and (instance in admitted or instance in quarantined):
            healthy += 1
            healthy_quarantined += instance in quarantined
    return {"per": per, "healthy": healthy, "healthy_quarantined": healthy_quarantined, "status": report["status"],
            "nodes": report["target_nodes"]}


def run_mix(mix_name: str, seeds: list[int], share: float, work: Path, program: Path | None) -> tuple[dict, Path | None]:
    mix = get_mix(mix_name)
    per: dict[str, Counter] = defaultdict(Counter)
    healthy = healthy_q = 0
    statuses: Counter = Counter()
    for seed in seeds:
        nodes = 125  # the local stack: 1,000 GPUs of p5.48xlarge
        drawn = draw(mix, max(1, round(share * nodes)), seed)
        kinds = Counter(k for _, k in drawn)
        classes_of: dict[str, list[str]] = defaultdict(list)
        for name, kind in drawn:
            classes_of[kind].append(name)
        project = make_project(work / f"{mix_name}-{seed}", stack_doc(kinds, seed), program)
        rollout(project)
        if program is None:
            program = project / ".gpufleet" / STACK / "sim" / "program.json"
        got = outcomes(project, classes_of)
        for name, c in got["per"].items():
            per[name].update(c)
        healthy += got["healthy"]
        healthy_q += got["healthy_quarantined"]
        statuses[got["status"]] += 1
        shutil.rmtree(project / ".gpufleet" / STACK / "bundles", ignore_errors=True)
    return {"per": per, "healthy": healthy, "healthy_q": healthy_q, "statuses": statuses}, program


def print_mix(mix_name: str, r: dict, seeds: int) -> None:
    mix = get_mix(mix_name)
    counted(f"mix {mix_name}: {mix.source}")
    counted(f"  rollouts: {seeds} seeds, status {dict(r['statuses'])}")
    counted(f"  {'class':<34} {'seen?':<7} {'injected':>8} {'caught':>7} {'missed':>7} {'unreached':>9}  "
            "missed as (fault kind: count)")
    vis = Counter()
    lat = Counter()
    for c in mix.classes:
        got = r["per"].get(c.name, Counter())
        kinds = ", ".join(f"{k[7:]}: {n}" for k, n in sorted(got.items()) if k.startswith("missed:"))
        counted(f"  {c.name:<34} {'yes' if c.visible else 'latent':<7} {got['injected']:>8} {got['caught']:>7} "
                f"{got['missed']:>7} {got['not-reached']:>9}  {kinds if c.visible else ''}")
        (vis if c.visible else lat).update({k: v for k, v in got.items() if ":" not in k})
    judged = vis["caught"] + vis["missed"]  # a node the rollout never gated is neither
    recall = vis["caught"] / judged if judged else float("nan")
    fq = r["healthy_q"] / r["healthy"] if r["healthy"] else float("nan")
    counted(f"  visible at admission: {vis['injected']} injected, {vis['caught']} caught, {vis['missed']} missed, "
            f"{vis['not-reached']} never gated: recall {recall:.3f} = caught / (caught + missed) "
            f"(goal >= 0.95: {'met' if recall >= 0.95 else 'MISSED'})")
    counted(f"  latent (invisible at admission, counted apart, not in the recall): {lat['injected']} injected, "
            f"{lat['missed']} entered the pool")
    counted(f"  healthy nodes quarantined: {r['healthy_q']} of {r['healthy']} gated: false-quarantine rate {fq:.4f} "
            f"(goal <= 0.005: {'met' if fq <= 0.005 else 'MISSED'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixes", default="llama3,crusoe", help=f"comma-separated, of {', '.join(sorted(MIXES))}")
    ap.add_argument("--seeds", type=int, default=20, help="rollouts per mix (seeds 1..N)")
    ap.add_argument("--faulty-share", type=float, default=0.06,
                    help="share of the nodes that arrive faulty (the local stack's realistic first day: ~6%%)")
    args = ap.parse_args()
    mixes = [m for m in args.mixes.split(",") if m]
    for m in mixes:
        get_mix(m)
    seeds = list(range(1, args.seeds + 1))
    results = {}
    program = None
    with tempfile.TemporaryDirectory(prefix="bench-field-") as tmp:
        for m in mixes:
            run = timed(lambda m=m: run_mix(m, seeds, args.faulty_share, Path(tmp), program))
            results[m], program = run.result
            results[m]["wall_s"] = run.min_s
    for m in mixes:
        print_mix(m, results[m], len(seeds))
    measured(f"wall time per mix ({len(seeds)} rollouts of 1,000 GPUs each, 1 run): " +
             ", ".join(f"{m} {results[m]['wall_s']:.0f} s" for m in mixes))


if __name__ == "__main__":
    main()
