"""Admitting 1,250 nodes (10,000 GPUs) through the simulator's pool and a real slurmctld; the Slurm
configuration for 10,000 GPUs generated and accepted.

Run: `python bench/bench_pool.py` (the Slurm part needs slurm-wlm; it is skipped, with the reason,
without it). Each figure is printed with a ratio to a baseline measured in the same run, so
figures compare across machines:
- sim: per admission, against one read of the pool file (`state()`);
- Slurm: per admission, against one `scontrol show node` round trip; `admit` (a read and a write
  per node) against `admit_many` (one read, one scontrol process fed on stdin: comments differ
  per node, so they cannot share a command line).
slurmctld loads the 1,250-node configuration alone (1,250 slurmd would take ~7 GB); since Slurm
refuses to RESUME a node whose slurmd never registered, the 1,250 Slurm admissions run on the live
125-node local-slurm cluster (every slurmd up), in 10 rounds of register-all-then-admit.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_sim(plan, nodes, records) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pool = SimPool(Path(tmp) / "pool.json", None, slots=[n.name for n in plan.nodes],
                       partitions=[p.name for p in plan.partitions])
        register = timed(lambda: pool.register_pending(nodes))
        admit = timed(lambda: [pool.admit(n.slot, records[n.slot]) for n in nodes])
        read = min(timed(pool.state) for _ in range(5))
        assert len(pool.state().by_state(NodeState.ADMITTED)) == len(nodes)
        pool.register_pending(nodes)
        batched = timed(lambda: pool.admit_many([(n.slot, records[n.slot]) for n in nodes]))
        assert len(pool.state().by_state(NodeState.ADMITTED)) == len(nodes)
    print(f"sim pool, {len(nodes)} nodes: register (1 call) {register:.2f} s; admit {len(nodes)} calls {admit:.2f} s "
          f"= {admit / len(nodes) * 1000:.1f} ms each (a durable rewrite each) = {admit / len(nodes) / read:.1f}x one "
          f"state() read ({read * 1000:.1f} ms); admit_many, one write: {batched:.2f} s")


def bench_slurm_config(spec, plan) -> str | None:
    """The 10,000-GPU configuration generated, then loaded by slurmctld (alone)."""
    if shutil.which("slurmctld") is None:
        print("slurm: skipped, slurm-wlm is not installed (apt-get install slurm-wlm)")
        return None
    version = slurm_version()
    with tempfile.TemporaryDirectory() as tmp:
        generated = timed(lambda: generate(spec, plan, LocalFlavour(Path(tmp), 1, 2), version))
        slurm = LocalSlurm(Path(tmp) / "slurm")
        try:
            started = slurm.up(spec, plan, with_nodes=False)
            cli = slurm.cli(timeout_s=30)
            shown = cli.run(["scontrol", "show", "node"]).count("NodeName=")
            switches = cli.run(["scontrol", "show", "topology"]).count("SwitchName=block")
            parts = cli.run(["scontrol", "show", "partition"]).count("PartitionName=")
        finally:
            slurm.down()
    print(f"slurm {version}: the {GPUS:,}-GPU configuration ({len(plan.nodes)} nodes, {plan.topology.blocks} blocks) "
          f"generated in {generated * 1000:.0f} ms; slurmctld loaded it and answered in {started:.2f} s: "
          f"{shown} nodes, {switches} block switches, {parts} partitions")
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
            round_trip = min(timed(lambda: cli.run(["scontrol", "-o", "show", "node", nodes[0].slot]))
                             for _ in range(5))
            for r in range(rounds):
                before = cli.calls
                register += timed(lambda: pool.register_pending(nodes))
                calls["register"] += cli.calls - before
                before = cli.calls
                single += timed(lambda: [pool.admit(n.slot, records[n.slot]) for n in nodes[:half]])
                calls["single"] += cli.calls - before
                before = cli.calls
                batched += timed(lambda: pool.admit_many([(n.slot, records[n.slot]) for n in nodes[half:]]))
                calls["batched"] += cli.calls - before
                assert len(pool.state().by_state(NodeState.ADMITTED)) == len(nodes)
        finally:
            slurm.down()
    n1, n2 = half * rounds, (len(nodes) - half) * rounds
    print(f"slurm live cluster: {len(nodes)} slurmd up in {up:.1f} s; {rounds} rounds = {n1 + n2} admissions")
    print(f"  register_pending of {len(nodes)} nodes: {register / rounds:.2f} s, {calls['register'] // rounds} "
          f"scontrol calls a round (nodes sharing a change share one call)")
    print(f"  admit, one node a call: {n1} in {single:.2f} s, {calls['single']} calls, {single / n1 * 1000:.1f} ms each "
          f"= {single / n1 / round_trip:.1f}x one scontrol round trip ({round_trip * 1000:.1f} ms); "
          f"{single / n1 * 1250:.1f} s for 1,250")
    print(f"  admit_many: {n2} in {batched:.2f} s, {calls['batched']} calls, {batched / n2 * 1000:.2f} ms each = "
          f"{(single / n1) / (batched / n2):.1f}x faster; {batched / n2 * 1250:.1f} s for 1,250")


def main() -> None:
    spec = spec_10k()
    plan = build_plan(spec)
    nodes = [PendingNode(slot=n.name, block=n.block, partition=plan.blocks[n.block].partition) for n in plan.nodes]
    records = {n.slot: record(n.slot, n.block) for n in nodes}
    bench_sim(plan, nodes, records)
    version = bench_slurm_config(spec, plan)
    if version is not None:
        bench_slurm_admissions(version, admissions=len(nodes))


if __name__ == "__main__":
    main()
