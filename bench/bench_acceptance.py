"""Modelled time-to-pool for 1,000 GPUs with the acceptance stages, per stage.

Run: python bench/bench_acceptance.py [--gpus 1000]. The rollout's own modelled timeline comes
from a real simulated rollout of the `local` stack scaled to the size (bench/bench_rollout.py's
project, in a child process); the acceptance stages' durations from infra.sim.acceptance
(what fio, iperf3, ping, fabtests and the smoke job report they ran for, on the plan's file
system and the catalog's network). The base checks run before the first batch and the smoke
job after the canary, both on the critical path; the image pre-pull is inside configure
(the simulator's `durations.imagePull`), so it is listed, not added.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_rollout import capture, make_project  # noqa: E402

from infra import catalog  # noqa: E402
from infra.plan import plan_stack  # noqa: E402
from infra.project import load_project  # noqa: E402
from infra.sim.acceptance import stage_seconds  # noqa: E402
from infra.spec import load_stack_path  # noqa: E402


def rollout_seconds(project: Path, stack: str) -> tuple[float, dict]:
    """The simulated rollout's modelled time-to-pool (its report's timeline end)."""
    capture(project, stack)
    out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_rollout.py"), "--one", str(project), stack],
                         check=True, cwd=REPO, capture_output=True, text=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return float(figures["timeline"]["batch_end_s"][-1]), figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / f"p{args.gpus}"
        stack = make_project(project, args.gpus)
        spec = load_stack_path(load_project(project).stack_file(stack))
        plan = plan_stack(spec)
        sku = catalog.get(spec.cluster.instance_type)
        stages = stage_seconds(spec.storage, plan.storage, sku, spec.acceptance)
        base, figures = rollout_seconds(project, stack)
    pull = (spec.simulator.durations.image_pull if spec.simulator else 0.0)
    total = base + stages["storage"] + stages["network"] + stages["smoke"]
    print(f"{args.gpus} GPUs ({len(plan.nodes)} x {sku.name}, {len(plan.batches)} batches, file system "
          f"{plan.storage.aggregate_throughput_mbs} MB/s, checkpoint {spec.storage.checkpoint_tib} TiB)")
    print(f"{'stage':<34}{'modelled s':>12}")
    print(f"{'storage base check (fio x7)':<34}{stages['storage']:>12.1f}")
    print(f"{'network base check (per block)':<34}{stages['network']:>12.1f}")
    print(f"{'rollout (batches, as simulated)':<34}{base:>12.1f}")
    print(f"{'  of which image pre-pull per node':<34}{pull:>12.1f}")
    print(f"{'training smoke (after canary)':<34}{stages['smoke']:>12.1f}")
    print(f"{'time to pool':<34}{total:>12.1f}  (+{100 * (total - base) / base:.1f}% for the acceptance stages)")
    print(f"rollout status {figures['status']}, admitted GPUs {figures['admitted_gpus']}")


if __name__ == "__main__":
    main()
