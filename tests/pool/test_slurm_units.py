"""Whole units enforced by slurmctld itself (job_submit.lua, the switch wait), on the real local Slurm.

The session cluster (conftest.py): three 5-node blocks of four 10-GPU units, train on blocks 0-1,
debug on block 2. Capacity is fragmented by admitting one node here and one there; jobs are
submitted the documented way (`gpufleet.pool.slurm.units`, what `gpufleet pool units` prints) and
read back the way an operator would (`squeue`, `scontrol show job`, the job's own output).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from gpufleet.plan import build_plan
from gpufleet.pool.slurm.job_submit import SWITCH_WAIT_S
from gpufleet.pool.slurm.local import LocalSlurm
from gpufleet.pool.slurm.units import submit_ways

from .conftest import Cluster, small_spec

UNIT_MESSAGE = "partition train takes whole units of 10 GPUs"


def _admit(c: Cluster, *indexes: int) -> list[str]:
    names = [c.plan.nodes[i].name for i in indexes]
    c.sh("scontrol", "update", f"NodeName={','.join(names)}", "State=RESUME")
    return names


def _block_of(c: Cluster, name: str) -> int:
    return next(n.block for n in c.plan.nodes if n.name == name)


def _way(c: Cluster, mode: str) -> tuple[str, ...]:
    return next(w.sbatch for w in submit_ways(c.spec, c.plan, "tree") if w.mode == mode)


def _job(c: Cluster, job: str) -> str:
    return c.sh("scontrol", "show", "job", job)


def _state(c: Cluster, job: str) -> tuple[str, str]:
    """(state, node list) from scontrol: the job's own record, also after it ended."""
    shown = _job(c, job)
    state = re.search(r"JobState=(\S+)", shown)
    nodes = re.search(r"\n\s*NodeList=(\S*)", shown)
    return (state.group(1) if state else "?"), (nodes.group(1) if nodes else "")


def _nodes(c: Cluster, hostlist: str) -> list[str]:
    return c.sh("scontrol", "show", "hostnames", hostlist).split() if hostlist and hostlist != "(null)" else []


def _lines(out: str) -> list[str]:
    """The job's own output: without srun's notes ("srun: job 4 queued and waiting for resources")."""
    return [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("srun: ")]


def _submit(c: Cluster, *args: str, wrap: str = "sleep 60") -> str:
    return c.sh("sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", wrap).strip().split(";")[0]


def _wait_state(c: Cluster, job: str, want: str, timeout_s: float = 100) -> tuple[str, str]:
    deadline = time.monotonic() + timeout_s
    got = _state(c, job)
    while got[0] != want and time.monotonic() < deadline:
        time.sleep(0.5)
        got = _state(c, job)
    return got


def test_a_unit_job_waits_for_a_whole_block_and_never_spans_two(cluster: Cluster):
    """One free node in block 0 and one in block 1: a one-unit job (2 nodes) fits neither block. It
    pends with one switch and a wait Slurm holds to a year, and starts inside block 1 once block 1
    has two free nodes."""
    free = _admit(cluster, 4, 5)  # block 0's last node, block 1's first
    assert [_block_of(cluster, n) for n in free] == [0, 1]
    args = _way(cluster, "independent")[1:]  # one unit (the array task's shape)
    job = _submit(cluster, *args)
    shown = _job(cluster, job)
    assert f"Switches=1@{SWITCH_WAIT_S // 86400}-00:00:00" in shown, shown  # the wait is the plugin's, not 300 s
    assert "max_switch_wait=31536000" in cluster.sh("scontrol", "show", "config")
    time.sleep(6)  # scheduling passes (sched_min_interval 2 s); a freed block is seen by the next main or backfill pass (60 s, 30 s)
    state, nodes = _state(cluster, job)
    assert state == "PENDING" and nodes in ("", "(null)"), _job(cluster, job)
    # a job that asked a short wait itself gets the plugin's, too
    short = _submit(cluster, *[a for a in args if not a.startswith("--switches")], "--switches=1@00:00:01")
    assert f"Switches=1@{SWITCH_WAIT_S // 86400}-00:00:00" in _job(cluster, short)
    time.sleep(4)
    assert _state(cluster, short)[0] == "PENDING"
    cluster.sh("scancel", short)
    _admit(cluster, 6)  # block 1 now has two free nodes: a whole unit's
    state, nodes = _wait_state(cluster, job, "RUNNING")
    assert state == "RUNNING", _job(cluster, job)
    assert sorted(_nodes(cluster, nodes)) == [cluster.plan.nodes[5].name, cluster.plan.nodes[6].name]


def test_a_unit_job_cannot_shorten_its_wait_after_submission(cluster: Cluster):
    _admit(cluster, 4, 5)
    job = _submit(cluster, *_way(cluster, "independent")[1:])
    changed = cluster.sh("scontrol", "update", f"JobId={job}", "Switches=1@00:00:01", check=False)
    assert "switch count and wait are fixed" in changed or "Unspecified error" in changed, changed
    assert f"Switches=1@{SWITCH_WAIT_S // 86400}-00:00:00" in _job(cluster, job)


@pytest.mark.parametrize("shape,why", [
    (("--nodes=1", "--gpus=5"), "it asks 5 GPUs, not a multiple of 10"),
    (("--nodes=1",), "it asks no GPUs"),
    (("--nodes=3", "--gpus=10"), "1 unit(s) span 2 node(s), it asks 3"),
    (("--gpus=10",), "it gives no --nodes"),
    (("--nodes=7", "--gpus=60"), "6 units are more than a block and not whole blocks (a multiple of 4)"),
    (("--nodes=2-3", "--gpus=10"), "it asks a node range"),
])
def test_a_shape_that_is_not_whole_units_is_refused_naming_the_unit_size(cluster: Cluster, shape, why):
    _admit(cluster, *range(10))
    out = cluster.sh("sbatch", "--parsable", "--output=/dev/null", "--partition=train", *shape, "--wrap", "true",
                     check=False)
    assert UNIT_MESSAGE in out and why in out, out
    assert "--nodes=2 --gpus=10" in out  # the message says what to ask
    assert "Batch job submission failed" in out and cluster.sh("squeue", "-h").strip() == ""  # nothing queued


def test_srun_outside_a_job_is_held_to_units_too(cluster: Cluster):
    _admit(cluster, 0, 1)
    out = cluster.sh("srun", "--partition=train", "--nodes=1", "true", check=False)
    assert UNIT_MESSAGE in out, out


def test_the_three_seed_modes_run_as_jobs_inside_the_plans_blocks(cluster: Cluster, tmp_path):
    _admit(cluster, *range(10))  # all of train: blocks 0 and 1
    blocks = {b.id: {cluster.plan.nodes[i].name for i in b.nodes} for b in cluster.plan.blocks}
    ways = {w.mode: w for w in submit_ways(cluster.spec, cluster.plan, "tree")}
    echo = ["bash", "-c", "echo $SLURM_JOB_ID $SLURMD_NODENAME"]

    # one job over all units: 8 units = both train blocks, every node of each
    everything = ways["all-units"]
    assert everything.units == 8
    out = cluster.sh("srun", *everything.sbatch, "--ntasks-per-node=1", "hostname")
    assert len(_lines(out)) == 10, out  # one task a node: every node of both blocks
    out = cluster.sh("srun", *everything.sbatch, "--ntasks-per-node=1", *echo)
    assert {ln.split()[1] for ln in _lines(out)} == blocks[0] | blocks[1], out

    # independent unit jobs: an array of train's 8 units, each task one unit inside one block
    array = ways["independent"]
    assert array.sbatch[0] == "--array=0-7"
    script = tmp_path / "unit.sh"
    script.write_text("#!/bin/bash\nsrun --ntasks-per-node=1 bash -c 'echo $SLURM_ARRAY_TASK_ID $SLURMD_NODENAME'\n")
    done = cluster.sh("sbatch", "--wait", f"--output={tmp_path}/array-%a.out", *array.sbatch, str(script))
    assert "Submitted batch job" in done
    for task in range(8):
        ran = {ln.split()[1] for ln in (tmp_path / f"array-{task}.out").read_text().split("\n") if ln.strip()}
        assert len(ran) == 2 and any(ran <= nodes for nodes in blocks.values()), (task, ran)

    # prefill/decode pools: one heterogeneous job, each component whole units inside one block.
    # Only the backfill scheduler starts a heterogeneous job (Slurm's heterogeneous_jobs page), and
    # its pass comes every bf_interval (30 s by default): the wait covers two passes.
    hetero = ways["prefill-decode"]
    at = hetero.sbatch.index(":")
    out = cluster.sh("srun", *hetero.sbatch[:at], "--ntasks-per-node=1", "bash", "-c", "echo prefill $SLURMD_NODENAME",
                     ":", *hetero.sbatch[at + 1:], "--ntasks-per-node=1", "bash", "-c", "echo decode $SLURMD_NODENAME",
                     timeout_s=90)
    pools: dict[str, set[str]] = {}
    for line in _lines(out):
        role, node = line.split()
        pools.setdefault(role, set()).add(node)
    assert set(pools) == {"prefill", "decode"} and all(len(v) == 2 for v in pools.values()), out
    for role, ran in pools.items():
        assert any(ran <= nodes for nodes in blocks.values()), (role, ran)
    assert not pools["prefill"] & pools["decode"]


@pytest.mark.slow
def test_a_fragmented_unit_job_still_waits_past_slurms_300_s_default(cluster: Cluster):
    """The issue's failure: `--switches=1` alone started across blocks after 300 s. Here the job
    waits well past it, then lands inside one block once one frees."""
    _admit(cluster, 4, 5)
    job = _submit(cluster, *_way(cluster, "independent")[1:])
    time.sleep(330)
    state, nodes = _state(cluster, job)
    assert state == "PENDING" and nodes in ("", "(null)"), _job(cluster, job)
    _admit(cluster, 3)  # block 0 now has nodes 3 and 4 free
    state, nodes = _wait_state(cluster, job, "RUNNING")
    assert state == "RUNNING" and sorted(_nodes(cluster, nodes)) == [cluster.plan.nodes[3].name,
                                                                      cluster.plan.nodes[4].name]


def test_the_health_check_fails_without_slurmd_and_on_nodes_slurm_drained(tmp_path):
    """Item 5: slurmctld alone still lists every node (drained, pending gates); that is no pool."""

    spec = small_spec()
    plan = build_plan(spec)
    names = [n.name for n in plan.nodes]
    slurm = LocalSlurm(tmp_path)
    try:
        slurm.up(spec, plan, with_nodes=False)
        problems = slurm.problems(names)
        assert problems and f"15 of 15 node(s) without a running slurmd: {names[0]}" in problems[0], problems
        slurm.up(spec, plan)
        assert slurm.problems(names) == []  # every node drained as pending gates: healthy, gpufleet's state
        env = slurm.cli().env()
        subprocess.run(["scontrol", "update", f"NodeName={names[3]}", "State=DRAIN", "Reason=Kill task failed"],
                       env=env, check=True, timeout=20)
        assert any("1 of 15 node(s) drained by Slurm itself: " + names[3] in p and "Kill task failed" in p
                   for p in slurm.problems(names)), slurm.problems(names)
        pid = int((tmp_path / "run" / f"slurmd-{names[7]}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not any("without a running slurmd: " + names[7] in p for p in slurm.problems(names)):
            assert time.monotonic() < deadline, slurm.problems(names)
            time.sleep(0.2)
    finally:
        slurm.down()
    assert slurm.problems(names) == ["slurmctld is not running"]


def test_the_mpi_choice_is_what_the_installed_slurm_runs(cluster: Cluster):
    """PMIx only when the library the installed plugin opens loads; else pmi2, which then runs."""
    from gpufleet.pool.slurm.mpi import choose_srun_mpi, pmix_library, pmix_loadable

    _admit(cluster, 0, 1)
    loadable, library = pmix_loadable(), pmix_library()
    mpi, findings = choose_srun_mpi("pmix", loadable, library)
    assert (mpi, bool(findings)) == (("pmix", False) if loadable else ("pmi2", True))
    unit = _way(cluster, "independent")[1:]
    chosen = cluster.sh("srun", f"--mpi={mpi}", *unit, "--ntasks-per-node=1", "bash", "-c", "echo ok-$SLURMD_NODENAME")
    assert len([ln for ln in _lines(chosen) if ln.startswith("ok-")]) == 2, chosen
    if not loadable:  # what the fallback avoids: srun --mpi=pmix fails on this Slurm
        failed = cluster.sh("srun", "--mpi=pmix", *unit, "true", check=False)
        assert "pmix" in failed.lower() and "error" in failed.lower(), failed
