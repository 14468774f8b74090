"""Which Slurm jobs hold a drain: squeue's rows parsed whatever the job names hold, one squeue for
all the slots of a drain, and against the real local Slurm (conftest.py) a running job named by id,
name and user, holding the upgrade's drain past its deadline and no longer once it has ended."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Mapping, Sequence

import pytest

from gpufleet.errors import PoolError
from gpufleet.pool.protocol import Evicting, HasHolders, Holder, NodeState
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.pool.slurm.cli import SlurmCli
from gpufleet.pool.slurm.conf import unit_request_args
from gpufleet.pool.slurm.jobs import RunningJob, parse_squeue, squeue_argv
from gpufleet.pool.slurm.transport import Completed, Status
from gpufleet.spec import UpgradeConfig
from gpufleet.daytwo.upgrade_run import Upgrader

from .conftest import Cluster
from .contract import record
from .test_slurm_real import _pending, _pool, _wait_job


# --- parsing ---------------------------------------------------------------------------------

def test_a_row_is_cut_at_its_first_five_pipes_so_the_name_keeps_blanks_and_pipes():
    out = ("4242|train|alice|research|prod-b0000-n[00000-00001]|llm pretrain | step 3|final\n"
           "17_3|debug|bob|(null)|prod-b0002-n00010|sweep\n")
    assert parse_squeue(out) == [
        RunningJob("4242", "train", "alice", "research", ("prod-b0000-n00000", "prod-b0000-n00001"),
                   "llm pretrain | step 3|final"),
        RunningJob("17_3", "debug", "bob", None, ("prod-b0002-n00010",), "sweep")]


def test_a_name_with_a_newline_continues_its_row_and_a_heterogeneous_component_is_a_row():
    out = "9+0|train|carol|ml|a1|first line\nsecond | line\n9+1|train|carol|ml|a2|\n"
    jobs = parse_squeue(out)
    assert [(j.job_id, j.name, j.nodes) for j in jobs] == [("9+0", "first line\nsecond | line", ("a1",)),
                                                          ("9+1", "", ("a2",))]


def test_no_running_job_is_no_row():
    assert parse_squeue("") == [] and parse_squeue("\n") == []


@pytest.mark.parametrize("out, named", [
    ("squeue: error: Invalid node name specified\n", "not a `%i|%P|%u|%a|%N|%j` row"),
    ("12|train|alice|ml|gpu-[a-b]|x\n", "job 12 is not a Slurm hostlist"),
])
def test_output_that_is_not_the_format_is_a_pool_error(out, named):
    with pytest.raises(PoolError, match=re.escape(named)):
        parse_squeue(out)


def test_the_workload_names_partition_job_name_and_owner():
    job = RunningJob("4242", "train", "alice", "research", ("n1",), "llm pretrain")
    assert job.workload() == "train/job/4242 llm pretrain (user alice, account research)"
    assert RunningJob("5", "debug", "bob", None, ("n1",), "x").workload() == "debug/job/5 x (user bob)"


# --- one squeue for a whole drain ------------------------------------------------------------

@dataclass
class Recorded:
    """A transport that answers squeue with canned rows and keeps what it was asked."""

    answer: str
    argv: list[list[str]] = field(default_factory=list)
    where: str = "this machine"
    user: str = "root"
    max_stdin_chars: int | None = None

    def execute(self, argv: Sequence[str], *, env: Mapping[str, str], stdin: str | None, timeout_s: float,
                merge_stderr: bool = False) -> Completed:
        self.argv.append(list(argv))
        return Completed(Status.DONE, 0, self.answer, "")


def test_holders_of_1250_slots_ask_one_squeue_and_keep_only_the_asked_slots():
    slots = [f"prod-b{b:04d}-n{b * 25 + i:05d}" for b in range(50) for i in range(25)]
    transport = Recorded("7|train|alice|ml|prod-b0000-n[00000-00001],prod-b0049-n01249|big run\n")
    pool = SlurmPool(SlurmCli(transport=transport))  # type: ignore[arg-type]
    got = pool.holders([slots[1], slots[-1], slots[5]])
    assert transport.argv == [squeue_argv("prod-b0000-n00001,prod-b0000-n00005,prod-b0049-n01249")]
    assert got == [Holder("prod-b0000-n00001", "train/job/7 big run (user alice, account ml)"),
                   Holder("prod-b0049-n01249", "train/job/7 big run (user alice, account ml)")]
    pool.holders(slots)
    assert len(transport.argv) == 2 and "prod-b0000-n[00000-00024]" in transport.argv[1][-3]
    assert pool.holders([]) == [] and len(transport.argv) == 2


def test_slurm_names_its_holders_but_never_evicts():
    pool = SlurmPool(SlurmCli(transport=Recorded("")))  # type: ignore[arg-type]
    assert isinstance(pool, HasHolders) and not isinstance(pool, Evicting)


# --- the real local Slurm ----------------------------------------------------------------------

NAME = "llm pretrain | step 3"


def _sleep_job(c: Cluster, slot: str, partner: str) -> str:
    """A one-unit job (Slurm takes no smaller shape) on `slot` and `partner`."""
    job = c.sh("sbatch", "--parsable", "--output=/dev/null", *unit_request_args(c.plan, "train", 1, "tree"),
               f"--nodelist={slot},{partner}", f"--job-name={NAME}", "--wrap", "sleep 300").strip()
    _wait_job(c, job, ("RUNNING",), timeout_s=30)
    return job


def test_a_running_job_is_named_with_its_id_name_and_user(cluster: Cluster):
    pool = _pool(cluster)
    nodes = _pending(cluster, 0, 1, 2)
    pool.register_pending(nodes)
    pool.admit_many([(n.slot, record(n)) for n in nodes])
    busy, idle = nodes[0].slot, nodes[1].slot
    job = _sleep_job(cluster, busy, nodes[2].slot)
    before = pool.cli.calls
    assert pool.holders([busy, idle]) == [Holder(busy, f"train/job/{job} {NAME} (user root)")]
    assert pool.cli.calls - before == 1
    assert pool.holders([idle]) == []


def test_a_running_job_holds_the_upgrade_drain_past_its_deadline_and_is_named(cluster: Cluster):
    """The upgrade's `_drain` against the real pool: DRAIN leaves the job running; at the deadline the
    drain returns the job by name; once the job has ended the same drain finishes."""
    pool = _pool(cluster)
    nodes = _pending(cluster, 2, 3)
    partner = _pending(cluster, 4)
    pool.register_pending(nodes + partner)
    pool.admit_many([(n.slot, record(n)) for n in nodes + partner])
    busy = nodes[0].slot
    job = _sleep_job(cluster, busy, partner[0].slot)
    ticks: list[float] = []
    d = SimpleNamespace(plan=cluster.plan, pool=pool,
                        spec=SimpleNamespace(upgrade=UpgradeConfig.model_validate({"drainTimeoutS": 600})))
    up = Upgrader(d, sleep=ticks.append, monotonic=lambda: 1000.0 * len(ticks), poll_s=1)  # type: ignore[arg-type]
    slots = [n.slot for n in nodes]
    assert up._drain(slots) == [f"train/job/{job} {NAME} (user root) on {busy}"]
    shown = pool.state().get(busy)
    assert shown is not None and shown.state is NodeState.PENDING and shown.busy  # drained, the job untouched
    assert _wait_job(cluster, job, ("RUNNING",)).startswith("RUNNING")
    cluster.sh("scancel", job)
    up = Upgrader(d, poll_s=0.2)  # type: ignore[arg-type]
    started = time.monotonic()
    assert up._drain(slots) == []  # nothing holds it any more
    assert time.monotonic() - started < 60
