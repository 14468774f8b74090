"""Modelled time-to-pool for 1,000 GPUs with the acceptance stages, per stage.

Run: python bench/bench_acceptance.py [--gpus 1000]. Every figure comes from one simulated rollout
of the `local` stack scaled to the size (bench/bench_rollout.py's project, in a child process):
its report's timeline (gpufleet.rollout.timeline) places the journaled acceptance stages on the
critical path where the flow runs them (storage before the canary is provisioned, network on the
canary's first hosts, the smoke job before batch 2), so the time-to-pool, the schedules and the
lower bound include them. The same batches' timeline without the stages is computed beside it
(the same model, the stages left out) to give their share. The stages' seconds are what fio,
iperf3, ping, fabtests and the smoke job report they ran for (gpufleet.sim.acceptance); the image
pre-pull is inside configure (the simulator's `durations.imagePull`), so it is listed, not added.
Nothing here is a timing on this machine: every second printed is modelled (the simulator's clock),
and each share or percentage compares modelled seconds with modelled seconds.
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

from _measure import counted, modelled  # noqa: E402
from bench_rollout import capture, make_project  # noqa: E402

from gpufleet import catalog  # noqa: E402
from gpufleet.plan import plan_stack  # noqa: E402
from gpufleet.project import load_project  # noqa: E402
from gpufleet.rollout.timeline import BatchTimes, timeline  # noqa: E402
from gpufleet.spec import load_stack_path  # noqa: E402

TOOLS = {"storage": "storage base check (fio x7)", "network": "network base check (pairs)",
         "smoke": "training smoke (after canary)"}


def rollout_report(project: Path, stack: str) -> dict:
    """The simulated rollout's report (`reports/<stack>/rollout.json`)."""
    capture(project, stack)
    subprocess.run([sys.executable, str(REPO / "bench" / "bench_rollout.py"), "--one", str(project), stack],
                   check=True, cwd=REPO, capture_output=True, text=True)
    return json.loads((project / "reports" / stack / "rollout.json").read_text())


def hours(seconds: float) -> str:
    return f"{seconds:>10.1f} s {seconds / 3600:>6.2f} h"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / f"p{args.gpus}"
        stack = make_project(project, args.gpus)
        spec = load_stack_path(load_project(project).stack_file(stack))
        plan = plan_stack(spec)
        rep = rollout_report(project, stack)
    sku = catalog.get(spec.cluster.instance_type)
    t, pipelining = rep["timeline"], rep["pipelining"]
    sched = "pipelined_s" if pipelining else "sequential_s"
    worked = [BatchTimes.from_durations(b["number"], b["seconds"]) for b in rep["batches"] if b["seconds"]]
    bare = timeline(worked, pipelining).to_dict()
    spans = t.get("acceptance_s", {})
    lines = {a["stage"]: a for a in rep["acceptance"]}
    total = t[sched]
    counted(f"{args.gpus} GPUs ({len(plan.nodes)} x {sku.name}, {len(plan.batches)} batches, file system "
            f"{plan.storage.aggregate_throughput_mbs} MB/s, checkpoint {spec.storage.checkpoint_tib} TiB); "
            f"rollout {rep['status']}, admitted GPUs {rep['admitted_gpus']}")
    modelled("the simulator's clock, one simulated rollout; share = the stage's modelled seconds over the "
             "modelled time to pool")
    modelled(f"{'stage':<34}{'status':>15}{'seconds':>10}{'start s':>10}{'end s':>10}{'share':>8}")
    for stage, label in TOOLS.items():
        line = lines.get(stage, {})
        start, end = spans.get(stage, (0.0, 0.0))
        modelled(f"{label:<34}{line.get('status', 'not-run'):>15}{end - start:>10.1f}{start:>10.1f}{end:>10.1f}"
                 f"{100 * (end - start) / total if total else 0.0:>7.1f}%")
    stages_s = sum(end - start for start, end in spans.values())
    pull = spec.simulator.durations.image_pull if spec.simulator else 0.0
    modelled(f"{'batches (provision .. admit)':<34}{'':>15}{total - stages_s:>10.1f}")
    modelled(f"{'  of which image pre-pull per node':<34}{'':>15}{pull:>10.1f}  (inside configure)")
    modelled(f"time to pool ({sched[:-2]}):   {hours(total)}  (+{100 * (total - bare[sched]) / bare[sched]:.1f}% "
             f"over {bare[sched]:.1f} s without the stages, the same model)")
    for key in ("sequential_s", "pipelined_s", "lower_bound_s"):
        modelled(f"  {key[:-2]:<14} with stages {hours(t[key])}   without {hours(bare[key])}")


if __name__ == "__main__":
    main()
