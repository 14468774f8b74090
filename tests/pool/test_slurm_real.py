"""The Slurm adapter, the generated configuration and unit requests against a real slurmctld.

The session cluster (conftest.py): 15 nodes in three 5-node blocks of four 10-GPU units; train on
blocks 0-1, debug on block 2 with a quota of one unit. Checks read Slurm the way an operator
would (`sinfo`, `scontrol show node`, `squeue`), not through the adapter.
"""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import datetime, timezone

import pytest

from gpufleet.errors import PoolError
from gpufleet.gates.launch import LaunchSpec
from gpufleet.plan import build_plan
from gpufleet.pool.protocol import NodeState, PendingNode, record_digest
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.pool.slurm.conf import unit_request_args
from gpufleet.pool.slurm.local import LocalSlurm
from gpufleet.pool.slurm.nodes import parse_json, parse_text
from gpufleet.spec import ClusterSpec, load_stack

from .conftest import Cluster
from .contract import record


def _pool(c: Cluster, failures: int = 2) -> SlurmPool:
    return SlurmPool(c.slurm.cli(), version=c.version, failures_before_blacklist=failures)


def _pending(c: Cluster, *indexes: int) -> list[PendingNode]:
    return [PendingNode(slot=c.plan.nodes[i].name, block=c.plan.nodes[i].block,
                        partition=c.plan.blocks[c.plan.nodes[i].block].partition) for i in indexes]


def _show(c: Cluster, slot: str) -> str:
    return c.sh("scontrol", "show", "node", slot)


def _sinfo_reasons(c: Cluster) -> dict[str, str]:
    out = c.sh("sinfo", "-h", "-N", "-o", "%N|%t|%E")
    return {ln.split("|")[0]: ln.split("|", 2)[1] + "|" + ln.split("|", 2)[2] for ln in out.splitlines() if ln}


def _wait_job(c: Cluster, job: str, states: tuple[str, ...], timeout_s: float = 20) -> str:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        last = c.sh("squeue", "-h", "-j", job, "-o", "%T|%r|%N", check=False).strip()
        if last.split("|")[0] in states:
            return last
        time.sleep(0.2)
    raise AssertionError(f"job {job} never reached {states}: {last!r}")


def test_register_admit_quarantine_blacklist_as_slurm_shows_it(cluster: Cluster):
    pool = _pool(cluster)
    n0, n1, n2 = _pending(cluster, 0, 1, 2)
    pool.register_pending([n0, n1, n2])
    rows = _sinfo_reasons(cluster)
    assert rows[n0.slot].startswith("drain") and rows[n0.slot].endswith("|gpufleet: pending gates")

    rec = record(n0)
    pool.admit(n0.slot, rec)
    shown = _show(cluster, n0.slot)
    assert "State=IDLE" in shown and "DRAIN" not in shown
    assert "Comment=gpufleet f=0 d=sha256:" in shown and "PASS batch=1 block=0 busbw=361.5GB/s" in shown

    pool.quarantine(n1.slot, "xid-79", 'GPU 3 "fell off the bus" (Xid 79)')
    shown = _show(cluster, n1.slot)
    assert "State=IDLE+DRAIN" in shown
    assert "Reason=gpufleet quarantine xid-79: GPU 3 'fell off the bus' (Xid 79)" in shown
    assert "Comment=gpufleet f=1" in shown

    pool.register_pending([n1])  # retested
    pool.quarantine(n1.slot, "nvlink-down", "NVLink 2 down")
    shown = _show(cluster, n1.slot)
    assert "Reason=gpufleet blacklist nvlink-down: NVLink 2 down" in shown and "Comment=gpufleet f=2" in shown

    pool.blacklist(n2.slot, "rack PDU replaced")
    rows = _sinfo_reasons(cluster)
    assert rows[n2.slot].endswith("|gpufleet blacklist blacklisted: rack PDU replaced")
    assert rows[n0.slot].startswith("idle")

    # a new adapter (another process, a resumed rollout) reads the same story back from Slurm
    state = _pool(cluster).state()
    assert state.get(n0.slot).state is NodeState.ADMITTED  # type: ignore[union-attr]
    assert state.get(n1.slot).failures == 2 and state.get(n1.slot).state is NodeState.BLACKLISTED  # type: ignore[union-attr]
    pool.clear(n1.slot)
    assert "Reason=gpufleet: pending gates" in _show(cluster, n1.slot) and "f=0" in _show(cluster, n1.slot)


def test_json_and_text_readers_agree(cluster: Cluster):
    pool = _pool(cluster)
    nodes = _pending(cluster, 0, 1, 2, 3)
    pool.register_pending(nodes)
    pool.admit(nodes[0].slot, record(nodes[0]))
    pool.quarantine(nodes[1].slot, "xid-79", "fell off the bus")
    pool.release(nodes[2].slot)
    via_json = parse_json(cluster.sh("sinfo", "--json"))
    via_text = parse_text(cluster.sh("scontrol", "-o", "show", "node"))
    assert set(via_json) == {n.name for n in cluster.plan.nodes}
    for name, node in via_json.items():
        assert via_text[name].drained == node.drained and via_text[name].reason == node.reason, name
        assert via_text[name].comment == node.comment and via_text[name].partitions == node.partitions, name
        assert via_text[name].block == node.block, name


def test_admit_many_batches_into_one_scontrol(cluster: Cluster):
    pool = _pool(cluster)
    nodes = _pending(cluster, *range(10))
    pool.register_pending(nodes)
    before = pool.cli.calls
    pool.admit_many([(n.slot, record(n)) for n in nodes])
    assert pool.cli.calls - before == 2  # one read, one scontrol fed on stdin
    state = pool.state()
    assert all(state.get(n.slot).state is NodeState.ADMITTED for n in nodes)  # type: ignore[union-attr]
    assert 'Comment="gpufleet f=0 d=sha256:' in _show(cluster, nodes[3].slot)  # scontrol keeps stdin's quotes
    before = pool.cli.calls
    pool.admit_many([(n.slot, record(n)) for n in nodes])  # idempotent: only the read
    assert pool.cli.calls - before == 1


def test_one_unit_lands_on_admitted_nodes_of_one_block(cluster: Cluster):
    pool = _pool(cluster)
    # train spans blocks 0 and 1; admitted: nodes 3, 4 (block 0) and 5 (block 1). One unit = 2 nodes,
    # and the only two admitted nodes inside one block are 3 and 4.
    nodes = _pending(cluster, 3, 4, 5)
    pool.register_pending(nodes)
    for n in nodes:
        pool.admit(n.slot, record(n))
    args = unit_request_args(cluster.plan, "train", 1, "tree")
    out = cluster.sh("srun", *args, "-l", "bash", "-c", "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES")
    ranks = [ln.split() for ln in out.splitlines() if re.match(r"^\d+: ", ln)]
    landed = sorted({r[1] for r in ranks})
    assert landed == sorted([nodes[0].slot, nodes[1].slot]), out
    gpus = sum(len(r[2].split(",")) for r in ranks)
    assert gpus == 10  # exactly one unit's GPUs (fake devices behind /dev/null)


def test_a_job_above_the_partition_limit_is_refused(cluster: Cluster):
    """EnforcePartLimits=ALL: a job its partition's quota can never hold is refused at submission
    instead of pending forever, while a job within the quota runs."""
    pool = _pool(cluster)
    nodes = _pending(cluster, 10, 11, 12, 13, 14)  # the whole debug block, admitted
    pool.register_pending(nodes)
    pool.admit_many([(n.slot, record(n)) for n in nodes])
    ok = cluster.sh("sbatch", "--parsable", "--output=/dev/null", *unit_request_args(cluster.plan, "debug", 1, "tree"),
                    "--wrap", "sleep 30")
    assert _wait_job(cluster, ok.strip(), ("RUNNING",)).split("|")[0] == "RUNNING"
    # quota 1 unit = MaxNodes 2; 2 units need 3 nodes, though free debug nodes remain
    assert "MaxNodes=2 " in cluster.sh("scontrol", "show", "partition", "debug")
    big = cluster.sh("sbatch", "--parsable", "--output=/dev/null", *unit_request_args(cluster.plan, "debug", 2, "tree"),
                     "--wrap", "true", check=False)
    assert "Batch job submission failed: Node count specification invalid" in big, big  # ESLURM_INVALID_NODE_COUNT


def test_launcher_runs_specs_in_parallel_on_pending_nodes(cluster: Cluster):
    pool = _pool(cluster)
    pairs = [_pending(cluster, 0, 1), _pending(cluster, 2, 3)]
    pool.register_pending([n for p in pairs for n in p])
    specs = [LaunchSpec(kind="slurm", name=f"pair{i}", nodes=tuple(n.slot for n in p), ranks=2, env={},
                        argv=("srun", f"--nodelist={','.join(n.slot for n in p)}", "--nodes=2", "--ntasks-per-node=1",
                              "-l", "bash", "-c", "echo rank-on-$SLURMD_NODENAME"))
             for i, p in enumerate(pairs)]
    results = pool.launcher().run(specs, timeout_s=30)
    assert [r.name for r in results] == ["pair0", "pair1"]
    for r, p in zip(results, pairs):
        assert r.exit_code == 0, r.output
        assert sorted(ln.split("rank-on-")[1] for ln in r.output.splitlines() if "rank-on-" in ln) == [n.slot for n in p]
        assert r.started <= r.ended <= datetime.now(timezone.utc)
    rows = _sinfo_reasons(cluster)  # back to pending, and no reservation left behind
    assert all(rows[n.slot].endswith("|gpufleet: pending gates") for p in pairs for n in p)
    assert "No reservations" in cluster.sh("scontrol", "show", "reservation")


def test_a_pair_across_two_partitions_runs_as_one_gate_job(cluster: Cluster):
    """Block 1 is train's, block 2 debug's: one Slurm job runs in one partition, so the pair runs in
    gpufleet's hidden all-nodes partition (without it: "Requested nodes not in this partition")."""
    pool = _pool(cluster)
    pair = _pending(cluster, 9, 10)
    assert {cluster.plan.nodes[9].block, cluster.plan.nodes[10].block} == {1, 2}
    pool.register_pending(pair)
    slots = [n.slot for n in pair]
    spec = LaunchSpec(kind="slurm", name="across", nodes=tuple(slots), ranks=2, env={},
                      argv=("srun", f"--nodelist={','.join(slots)}", "--nodes=2", "--ntasks-per-node=1",
                            "bash", "-c", "echo rank-on-$SLURMD_NODENAME $SLURM_JOB_PARTITION"))
    result, = pool.launcher().run([spec], timeout_s=30)
    assert result.exit_code == 0, result.output
    ran = sorted(ln.split("rank-on-")[1] for ln in result.output.splitlines() if "rank-on-" in ln)
    assert ran == [f"{s} gpufleet-gates" for s in slots]
    # not a pool partition: absent from what a node is read to be in (Slurm shows a hidden
    # partition to operators such as root, and hides it from everyone else)
    line = cluster.sh("scontrol", "-o", "show", "node", slots[0])
    assert "gpufleet-gates" in line  # Slurm lists it on the node...
    assert parse_text(line)[slots[0]].partitions == ("train",)  # ...the reader drops it
    assert all(set(n.partitions) <= {"train", "debug"} and n.partitions for n in pool.nodes().values())


def test_no_job_but_a_gate_run_enters_the_gates_partition(cluster: Cluster):
    names = [cluster.plan.nodes[i].name for i in (0, 1)]
    cluster.sh("scontrol", "update", f"NodeName={','.join(names)}", "State=RESUME")
    out = cluster.sh("sbatch", "--parsable", "--output=/dev/null", "--partition=gpufleet-gates", "--nodes=2",
                     "--gpus=10", "--wrap", "true", check=False)
    assert "partition gpufleet-gates is gpufleet's own" in out and "Batch job submission failed" in out, out
    assert cluster.sh("squeue", "-h").strip() == ""


def test_refusals_name_the_node_and_change_nothing(cluster: Cluster):
    pool = _pool(cluster)
    n0, n1 = _pending(cluster, 0, 1)
    with pytest.raises(PoolError, match="local-b9999-n99999.*no such node in Slurm"):
        pool.admit("local-b9999-n99999", record("local-b9999-n99999"))
    with pytest.raises(PoolError, match=f"{n0.slot}.*partition 'debug'.*node is in train"):
        pool.register_pending([PendingNode(slot=n0.slot, block=0, partition="debug")])
    with pytest.raises(PoolError, match=f"{n1.slot}.*block 2"):
        pool.register_pending([PendingNode(slot=n1.slot, block=2, partition="train")])
    for slot in (n0.slot, n1.slot):  # nothing written: no gpufleet comment, still the configuration's drain
        assert "Comment=" not in _show(cluster, slot) and "Reason=gpufleet: pending gates" in _show(cluster, slot)


def test_a_stopped_controller_is_a_bounded_pool_error(cluster: Cluster):
    pid = int((cluster.slurm.root / "run" / "slurmctld.pid").read_text())
    pool = SlurmPool(cluster.slurm.cli(timeout_s=2), version=cluster.version)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(PoolError, match="local-b0000-n00000.*did not answer.*within 2 s"):
            pool.quarantine("local-b0000-n00000", "xid-79", "fell off the bus")
        assert time.monotonic() - started < 10
    finally:
        os.kill(pid, signal.SIGCONT)
    assert _pool(cluster).state().get("local-b0000-n00000").state is NodeState.PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize("unit_gpus,target_gpus", [(16, 64), (8, 24)])
def test_slurmctld_accepts_other_plan_shapes(tmp_path, unit_gpus, target_gpus):
    raw = load_stack("local").model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["cluster"].update(targetGpus=target_gpus, unitGpus=unit_gpus, spareFraction=0)
    raw["partitions"] = [{"name": "all", "mode": "independent", "gpus": target_gpus, "priority": 1}]
    raw["pool"] = {"type": "slurm"}
    spec = ClusterSpec.from_raw(raw, source="test")
    plan = build_plan(spec)
    slurm = LocalSlurm(tmp_path)
    try:
        slurm.up(spec, plan)
        states = slurm.health()
        assert set(states) == {n.name for n in plan.nodes} and set(states.values()) == {"drained"}
        topo = slurm.cli().run(["scontrol", "show", "topology"])
        assert topo.count("SwitchName=block") == plan.topology.blocks
    finally:
        slurm.down()
    assert not slurm.running()


@pytest.mark.slow
def test_the_full_local_slurm_stack_of_125_nodes(tmp_path):
    spec = load_stack("local-slurm")
    plan = build_plan(spec)
    slurm = LocalSlurm(tmp_path)
    started = time.monotonic()
    try:
        took = slurm.up(spec, plan)
        states = slurm.health()
        assert len(states) == 125 == len(plan.nodes) and set(states.values()) == {"drained"}
        pool = SlurmPool(slurm.cli(), version=None)  # the text reader, as on a Slurm without JSON
        first_block = [PendingNode(slot=plan.nodes[i].name, block=0, partition="train") for i in range(5)]
        pool.register_pending(first_block)
        for n in first_block:
            pool.admit(n.slot, record(n))
        assert len(pool.state().by_state(NodeState.ADMITTED)) == 5
        assert took < 45
    finally:
        slurm.down()
    assert time.monotonic() - started < 60


def test_registration_points_node_addr_at_the_instance(cluster: Cluster):
    n0 = _pending(cluster, 7)[0]
    moved = PendingNode(slot=n0.slot, block=n0.block, partition=n0.partition, address="127.0.0.2")
    _pool(cluster).register_pending([moved])  # a replacement instance: a new private IP for the slot
    assert "NodeAddr=127.0.0.2 " in _show(cluster, n0.slot)
    local = SlurmPool(cluster.slurm.cli(), version=cluster.version, set_node_addresses=False)
    local.register_pending([PendingNode(slot=n0.slot, block=n0.block, partition=n0.partition, address="10.9.9.9")])
    assert "NodeAddr=127.0.0.2 " in _show(cluster, n0.slot)  # the local cluster keeps its loopback address


def test_admit_many_recovers_when_slurm_refuses_a_line(cluster: Cluster):
    """A node resumed behind the adapter's back (its read is stale): scontrol refuses that RESUME
    ("Invalid node state specified") without naming the node; the adapter reads back and admits
    what did not apply one by one, so every admission lands with its own record."""
    pool = _pool(cluster)
    nodes = _pending(cluster, 0, 1, 2)
    pool.register_pending(nodes)
    stale = pool.nodes()  # all three drained
    cluster.sh("scontrol", "update", f"NodeName={nodes[0].slot}", "State=RESUME")
    reads = iter([stale])
    real_nodes = pool.nodes
    pool.nodes = lambda: next(reads, None) or real_nodes()  # type: ignore[method-assign]
    records = {n.slot: record(n, busbw=400.0 + i) for i, n in enumerate(nodes)}
    before = pool.cli.calls
    pool.admit_many([(n.slot, records[n.slot]) for n in nodes])
    assert pool.cli.calls - before >= 2  # the stdin batch failed, and the read-back followed
    state = _pool(cluster).state()
    for n in nodes:
        got = state.get(n.slot)
        assert got is not None and got.state is NodeState.ADMITTED, got
        assert got.record_digest == record_digest(records[n.slot])
