"""The gates' multi-node runs on a local Slurm (`local-slurm`) as real `srun` job steps whose tasks
print the simulator's output for the run, so slurmctld places and logs every pair test while the
verdict still comes from the real gates reading the simulated fabric's faults.

Why a relay: the local cluster's slurmd nodes have no GPUs, EFA or nccl-tests; what a run prints
is the simulator's (`gpufleet.sim.fabric.SimLauncher`, its injected faults), but the launch path
is Slurm's own: the real `SlurmLauncher` takes the pending nodes into a maintenance reservation,
resumes them, runs `srun -w NODES -N<n> --ntasks-per-node=1` (CPUs only), and drains them back.
Rank 0 writes the simulator's bytes; every task exits with the simulator's exit code, so srun's
status is the run's. Times stay the simulator's (the rollout's modelled timeline). Each srun names
the nodes' partition; a run over nodes of two partitions (a newcomer and a known-good partner from
another partition) cannot be one Slurm job, so it keeps the simulator's result, and the relay folder
says so (`<run>.not-relayed`).

The smoke job likewise (`SrunSmokeCollector`): the simulator's `train_smoke` output through one srun
over the smoke's nodes. Run as `python -m gpufleet.sim.srun_relay FILE CODE` (what each task executes).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from gpufleet.gates import acceptance as A
from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool.protocol import Launcher, LaunchResult
from gpufleet.pool.slurm.hostlist import hostlist
from gpufleet.rollout.smoke_stage import SMOKE, smoke_bundle

log = logging.getLogger(__name__)


class SrunRelayLauncher:
    """`Launcher`: the simulator's results, each run through real srun on its nodes (`bind` the real
    Slurm launcher once the pool exists)."""

    def __init__(self, sim: Launcher, folder: Path, partitions: Mapping[str, str] | None = None,
                 python: str = sys.executable) -> None:
        self.sim, self.folder, self.python = sim, Path(folder), python
        self.partitions = dict(partitions or {})  # slot -> its Slurm partition (the plan's)
        self.real: Launcher | None = None

    def bind(self, real: Launcher) -> None:
        self.real = real

    def relay_argv(self, spec: LaunchSpec, out: Path, code: int) -> tuple[str, ...]:
        parts = {self.partitions[n] for n in spec.nodes if n in self.partitions}
        where = (f"--partition={parts.pop()}",) if len(parts) == 1 else ()
        return ("srun", "-w", hostlist(list(spec.nodes)), f"-N{len(spec.nodes)}", "--ntasks-per-node=1", *where,
                f"--job-name=gpufleet-{spec.name}", self.python, "-m", "gpufleet.sim.srun_relay", str(out), str(code))

    def spans_partitions(self, spec: LaunchSpec) -> bool:
        """Nodes of two partitions: one Slurm job cannot hold them (a job runs in one partition)."""
        return len({self.partitions.get(n) for n in spec.nodes}) > 1

    def run(self, specs: Sequence[LaunchSpec], timeout_s: float) -> list[LaunchResult]:
        if not specs:
            return []
        simulated = self.sim.run(specs, timeout_s)
        real = self.relay([(spec, r.output, r.exit_code) for spec, r in zip(specs, simulated)], timeout_s)
        return [replace(sim, exit_code=got.exit_code, output=got.output, command=spec.command_line)
                for spec, sim, got in zip(specs, simulated, real)]

    def relay(self, runs: Sequence[tuple[LaunchSpec, str, int]], timeout_s: float) -> list[LaunchResult]:
        """Each (spec, the simulator's output, its exit code) as a real srun on the spec's nodes."""
        if self.real is None:
            raise RuntimeError("the srun relay has no Slurm launcher bound (gpufleet.rollout.wiring binds it)")
        self.folder.mkdir(parents=True, exist_ok=True)
        relayed, kept = [], {}
        for i, (spec, output, code) in enumerate(runs):
            out = self.folder / (re.sub(r"[^A-Za-z0-9_.-]", "-", spec.name) + ".out")
            out.write_text(output, encoding="utf-8")
            if self.spans_partitions(spec):  # the simulator's result stands, and the file says why
                why = (f"not run through srun: its nodes lie in partitions "
                       f"{', '.join(sorted({self.partitions.get(n) or '?' for n in spec.nodes}))}\n")
                out.with_suffix(".not-relayed").write_text(why, encoding="utf-8")
                log.warning("srun relay: %s %s", spec.name, why.strip())
                now = datetime.now(timezone.utc)
                kept[i] = LaunchResult(spec.name, spec.nodes, code, output, now, now, spec.command_line)
                continue
            relayed.append(replace_argv(spec, self.relay_argv(spec, out, code)))
        ran = iter(self.real.run(relayed, timeout_s) if relayed else [])
        return [kept[i] if i in kept else next(ran) for i in range(len(runs))]


class SrunSmokeCollector:
    """The simulator's acceptance collector, with the smoke job run as a real srun on its nodes
    (one task per node, CPUs only) that prints the simulator's `train_smoke` output: its bundle is
    the launcher's (`smoke_bundle`), srun's output and exit code, as on a real Slurm stack."""

    TIMEOUT_S = 300.0  # the relay prints a file: minutes are Slurm's scheduling, not the job

    def __init__(self, sim: Any, relay: SrunRelayLauncher) -> None:
        self.sim, self.relay = sim, relay

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        bundle = self.sim.collect(stage, nodes, pairs, out)
        if stage != SMOKE:
            return bundle
        text = (bundle / A.TRAIN_SMOKE).read_text(encoding="utf-8")
        spec = LaunchSpec(kind="slurm", name="acceptance-smoke", nodes=tuple(nodes), ranks=len(nodes), env={})
        got, = self.relay.relay([(spec, text, 0)], self.TIMEOUT_S)
        return smoke_bundle(out, got, "srun-relay")

    def __getattr__(self, name: str) -> Any:  # seconds(), storage_mount: the simulator's
        return getattr(self.sim, name)


def replace_argv(spec: LaunchSpec, argv: tuple[str, ...]) -> LaunchSpec:
    return spec.model_copy(update={"argv": argv})


def partitions_of(plan: Any) -> dict[str, str]:
    """slot -> the Slurm partition its block is in (slurm.conf's PartitionName lines, from the plan)."""
    by_block = {b.id: b.partition for b in plan.blocks if b.partition}
    return {n.name: by_block[n.block] for n in plan.nodes if n.block in by_block}


def main(argv: Sequence[str]) -> int:
    """One task of the relay: rank 0 prints FILE; every task exits CODE."""
    path, code = argv
    if os.environ.get("SLURM_PROCID", "0") == "0":
        sys.stdout.buffer.write(Path(path).read_bytes())
        sys.stdout.flush()
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
