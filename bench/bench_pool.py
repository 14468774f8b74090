"""Admitting 1,250 nodes (10,000 GPUs) through the simulator's pool and a real slurmctld; the Slurm
configuration for 10,000 GPUs generated and accepted.

Run: `python bench/bench_pool.py [--quick]` (the Slurm part needs slurm-wlm; it is skipped, with the
reason, without it; `--quick` leaves out the live 125-node cluster). Each figure is printed with a ratio to a baseline measured in the same run, so
figures compare across machines:
- sim: per admission, against one read of the pool file (`state()`);
- Slurm: per admission, against one `scontrol show node` round trip; `admit` (a read and a write
  per node) against `admit_many` (one read, one scontrol process fed on stdin: comments differ
  per node, so they cannot share a command line).
slurmctld loads the 1,250-node configuration alone (1,250 slurmd would take ~7 GB); since Slurm
refuses to RESUME a node whose slurmd never registered, the 1,250 Slurm admissions run on the live
125-node local-slurm cluster (every slurmd up), in 10 rounds of register-all-then-admit.
Every timing is one run unless it says otherwise (admitting changes the pool: a second run would
measure something else); the baselines are min and median over 5 runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from _measure import counted, measured, timed  # noqa: E402

from gpufleet.gates.admission import AdmissionRecord, BusbwFigures  # noqa: E402
from gpufleet.gates.verdict import Action, CheckResult, Verdict  # noqa: E402
from gpufleet.plan import build_plan  # noqa: E402
from gpufleet.pool.protocol import NodeState, PendingNode  # noqa: E402
from gpufleet.pool.sim import SimPool  # noqa: E402
from gpufleet.pool.slurm.adapter import SlurmPool  # noqa: E402
from gpufleet.pool.slurm.conf import LocalFlavour, generate  # noqa: E402
from gpufleet.pool.slurm.local import LocalSlurm, slurm_version  # noqa: E402
from gpufleet.spec import load_stack  # noqa: E402

GPUS = 10_000
CHECK = CheckResult(check_id="nccl.intra_node", severity="Q", measured="480 GB/s", expected=">= 430 GB/s",
                    verdict=Verdict.PASS, research_ref="gates-research.md (b)")


def spec_10k():
    """The local stack scaled to 10,000 GPUs: partitions in the same proportions, a network that fits."""
    spec = load_stack("local")
    scale = GPUS // spec.cluster.target_gpus
    return spec.model_copy(update={
        "cluster": spec.cluster.model_copy(update={"target_gpus": GPUS, "name": "bench"}),
        "partitions": tuple(p.model_copy(update={"units": p.units * scale, "quota_units": (p.quota_units or 0) * scale})
                            for p in spec.partitions),
        "network": spec.network.model_copy(update={"compute_subnet_cidr": "10.0.0.0/17",
                                                   "management_subnet_cidr": "10.0.128.0/24"})})


def record(slot: str, block: int) -> AdmissionRecord:
    return AdmissionRecord(slot=slot, instance_id="i-0123456789abcdef0", instance_type="p5.48xlarge", stack="bench",
                           batch=1 + block // 5, block=block, bom_digest="sha256:" + "ab" * 32, verdict=Verdict.PASS,
                           action=Action.ADMIT, checks=(CHECK,), busbw=BusbwFigures(intra_node_gbs=480.0),
                           decided_at=datetime(2026, 11, 30, tzinfo=timezone.utc))


def bench_sim(plan, nodes, records) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pool = SimPool(Path(tmp) / "pool.json", None, slots=[n.name for n in plan.nodes],
                       partitions=[p.name for p in plan.partitions])
        register = timed(lambda: pool.register_pending(nodes)).min_s
        admit = timed(lambda: [pool.admit(n.slot, records[n.slot]) for n in nodes]).min_s
        read = timed(pool.state, runs=5)
        assert len(pool.state().by_state(NodeState.ADMITTED)) == len(nodes)
        pool.register_pending(nodes)
        batched = timed(lambda: pool.admit_many([(n.slot, records[n.slot]) for n in nodes])).min_s
        assert len(pool.state().by_state(NodeState.ADMITTED)) == len(nodes)
    measured(f"sim pool, {len(nodes)} nodes: register (1 call) {register:.2f} s; admit {len(nodes)} calls {admit:.2f} s "
             f"= {admit / len(nodes) * 1000:.1f} ms each (a durable rewrite each) = {admit / len(nodes) / read.min_s:.1f}x "
             f"one state() read ({read.wall('ms')}; against the min); admit_many, one write: {batched:.2f} s")


def bench_slurm_config(spec, plan) -> str | None:
    """The 10,000-GPU configuration generated, then loaded by slurmctld (alone)."""
    if shutil.which("slurmctld") is None:
        print("slurm: skipped, slurm-wlm is not installed (apt-get install slurm-wlm)")
        return None
    version = slurm_version()
    with tempfile.TemporaryDirectory() as tmp:
        generated = timed(lambda: generate(spec, plan, LocalFlavour(Path(tmp), 1, 2), version)).min_s
        slurm = LocalSlurm(Path(tmp) / "slurm")
        try:
            started = slurm.up(spec, plan, with_nodes=False)
            cli = slurm.cli(timeout_s=30)
            shown = cli.run(["scontrol", "show", "node"]).count("NodeName=")
            switches = cli.run(["scontrol", "show", "topology"]).count("SwitchName=block")
            parts = cli.run(["scontrol", "show", "partition"]).count("PartitionName=")
        finally:
            slurm.down()
    measured(f"slurm {version}: the {GPUS:,}-GPU configuration ({len(plan.nodes)} nodes, {plan.topology.blocks} blocks) "
             f"generated in {generated * 1000:.0f} ms; slurmctld loaded it and answered in {started:.2f} s (1 run each)")
    counted(f"slurmctld shows {shown} nodes, {switches} block switches, {parts} partitions")
    return version


def bench_slurm_admissions(version: str, admissions: int) -> None:
    """`admissions` admissions on the live 125-node local-slurm cluster (every slurmd running:
    Slurm refuses to RESUME a node whose slurmd never registered), in rounds of
    register-all-pending then admit: half one node a call, half with admit_many."""
    spec = load_stack("local-slurm")
    plan = build_plan(spec)
    nodes = [PendingNode(slot=n.name, block=n.block, partition=plan.blocks[n.block].partition) for n in plan.nodes]
    records = {n.slot: record(n.slot, n.block) for n in nodes}
    rounds = max(1, admissions // len(nodes))
    half = len(nodes) // 2
    single = batched = register = 0.0
    calls = {"register": 0, "single": 0, "batched": 0}
    with tempfile.TemporaryDirectory() as tmp:
        slurm = LocalSlurm(Path(tmp))
        try:
            up = slurm.up(spec, plan)
            cli = slurm.cli(timeout_s=30)
            pool = SlurmPool(cli, version=version, set_node_addresses=False)
            trip = timed(lambda: cli.run(["scontrol", "-o", "show", "node", nodes[0].slot]), runs=5)
            round_trip = trip.min_s
            for r in range(rounds):
                before = cli.calls
                register += timed(lambda: pool.register_pending(nodes)).min_s
                calls["register"] += cli.calls - before
                before = cli.calls
                single += timed(lambda: [pool.admit(n.slot, records[n.slot]) for n in nodes[:half]]).min_s
                calls["single"] += cli.calls - before
                before = cli.calls
                batched += timed(lambda: pool.admit_many([(n.slot, records[n.slot]) for n in nodes[half:]])).min_s
                calls["batched"] += cli.calls - before
                assert len(pool.state().by_state(NodeState.ADMITTED)) == len(nodes)
        finally:
            slurm.down()
    n1, n2 = half * rounds, (len(nodes) - half) * rounds
    measured(f"slurm live cluster: {len(nodes)} slurmd up in {up:.1f} s (1 run); {rounds} rounds = {n1 + n2} admissions")
    counted(f"register_pending of {len(nodes)} nodes: {calls['register'] // rounds} scontrol calls a round (nodes "
            f"sharing a change share one call); admit one node a call: {calls['single']} calls for {n1}; "
            f"admit_many: {calls['batched']} calls for {n2}")
    measured(f"register_pending of {len(nodes)} nodes: {register / rounds:.2f} s a round (mean of {rounds} rounds)")
    measured(f"admit, one node a call: {n1} in {single:.2f} s, {single / n1 * 1000:.1f} ms each "
             f"= {single / n1 / round_trip:.1f}x one scontrol round trip ({trip.wall('ms')}; against the min)")
    measured(f"admit_many: {n2} in {batched:.2f} s, {batched / n2 * 1000:.2f} ms each = "
             f"{(single / n1) / (batched / n2):.1f}x faster than one node a call (both measured here)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="leave out the live 125-node Slurm cluster")
    args = ap.parse_args()
    spec = spec_10k()
    plan = build_plan(spec)
    nodes = [PendingNode(slot=n.name, block=n.block, partition=plan.blocks[n.block].partition) for n in plan.nodes]
    records = {n.slot: record(n.slot, n.block) for n in nodes}
    bench_sim(plan, nodes, records)
    version = bench_slurm_config(spec, plan)
    if version is not None and not args.quick:
        bench_slurm_admissions(version, admissions=len(nodes))


if __name__ == "__main__":
    main()
