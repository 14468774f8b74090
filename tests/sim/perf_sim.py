"""Wall time of the simulator's share of a local rollout at 1,000 and 10,000 GPUs (not a test).

    .venv/bin/python -m tests.sim.perf_sim [1000 10000]

Per size: opening the cloud (the real program under mocks, then from the cache), provisioning
every batch, configure, preflight (rendering and writing every bundle), and, for scale, reading
and gating them with the real gates. Prints seconds per step.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from gpufleet.gates.bundle import find_bundles, read_bundle
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.versions import expectations
from gpufleet.plan import build_plan
from gpufleet.sim import SimulatedCloud

from .conftest import REPO, make_project, make_spec


def measure(gpus: int, root: Path) -> dict[str, float]:
    spec = make_spec(target_gpus=gpus, faults={"xid-79": 0.01, "row-remap-pending": 0.01, "bad-nic": 0.005},
                     badLinks=1)
    project = make_project(root)
    plan = build_plan(spec)
    t: dict[str, float] = {}
    start = time.perf_counter()
    cloud = SimulatedCloud.open(spec, plan, project, "local")
    t["open (program under mocks)"] = time.perf_counter() - start
    start = time.perf_counter()
    cloud = SimulatedCloud.open(spec, plan, project, "local")
    t["reopen (cached program)"] = time.perf_counter() - start
    start = time.perf_counter()
    res = cloud.provisioner.provision(len(plan.batches), plan.nodes)
    t["provision all"] = time.perf_counter() - start
    insts = list(res.instances.values())
    start = time.perf_counter()
    cloud.executor.configure(insts)
    t["configure"] = time.perf_counter() - start
    start = time.perf_counter()
    cloud.executor.preflight(insts, root / "bundles")
    t[f"preflight ({len(insts)} bundles)"] = time.perf_counter() - start
    start = time.perf_counter()
    bundles = [read_bundle(f) for f in find_bundles(root / "bundles")]
    settings = GateSettings(instance_type=cloud.sku.name, pool="sim",
                            expected_versions=expectations(cloud.bom, spec.image.os, "sim"))
    gate_cohort(bundles, settings)
    t["read + gate (real gates)"] = time.perf_counter() - start
    return t


def main(sizes: list[int]) -> None:
    scratch = REPO / ".gpufleet"  # gitignored run state: the file system a rollout writes its bundles to
    scratch.mkdir(exist_ok=True)
    for gpus in sizes:
        with tempfile.TemporaryDirectory(dir=scratch, prefix="perf-sim-") as tmp:
            figures = measure(gpus, Path(tmp))
        print(f"{gpus} GPUs")
        for step, seconds in figures.items():
            print(f"  {step:<32} {seconds:7.2f} s")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
