"""The patrol's idle-node recheck as the lowest-priority Slurm job: one hold per node, preempted by any real job.

Why a job: a recheck the scheduler does not know about races every job that lands meanwhile. A hold
is an `sbatch --exclusive -w NODE` of the patrol's QOS (`gpufleet.plan.access.PATROL_QOS`: Priority
0, in every other QOS's Preempt= list, `--no-requeue` so preemption cancels it), so while the patrol
collects, Slurm keeps the node from other jobs only until one needs it: then it cancels the hold and
starts that job. A hold that is no longer running when the round ends was preempted: the patrol
counts its node as yielded (left to the job, no verdict, no failure) and rechecks it next time.

Only where slurmdbd holds the patrol's QOS (a stack with accounting, `gpufleet pool access apply`);
elsewhere `available` is False and the patrol rechecks without holds, re-reading the pool per round.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from gpufleet.errors import PoolError
from gpufleet.plan.access import PATROL_ACCOUNT, PATROL_QOS
from gpufleet.pool.slurm.cli import SlurmCli

HOLD_NAME = "gpufleet-patrol"
HOLD_S = 24 * 3600  # the hold's own command; release() cancels it long before
GONE = {"CANCELLED", "PREEMPTED", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
        "DEADLINE"}


def hold_argv(slot: str, partition: str) -> list[str]:
    """One idle node held whole (--exclusive) for the patrol, no GPUs asked, never requeued."""
    return ["sbatch", "--parsable", f"--qos={PATROL_QOS}", f"--account={PATROL_ACCOUNT}", f"--partition={partition}",
            f"--nodelist={slot}", "--nodes=1", "--exclusive", "--no-requeue", f"--job-name={HOLD_NAME}",
            "--output=/dev/null", "--wrap", f"sleep {HOLD_S}"]


def parse_states(text: str) -> dict[str, str]:
    """`squeue -h -t all -o %i|%T` -> job id -> state."""
    out = {}
    for line in text.splitlines():
        job, _, state = line.strip().partition("|")
        if job and state:
            out[job] = state
    return out


class SlurmPatrolHolds:
    def __init__(self, cli: SlurmCli, *, start_s: float = 30.0, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cli, self.start_s, self.sleep, self.clock = cli, start_s, sleep, clock
        self._available: bool | None = None

    def available(self) -> bool:
        if self._available is None:
            try:
                names = self.cli.run(["sacctmgr", "-n", "-P", "show", "qos", PATROL_QOS, "format=name"]).split()
            except PoolError:
                names = []
            self._available = PATROL_QOS in names
        return self._available

    def _states(self, jobs: list[str]) -> dict[str, str]:
        if not jobs:
            return {}
        return parse_states(self.cli.run(["squeue", "-h", "-t", "all", "-j", ",".join(jobs), "-o", "%i|%T"]))

    def hold(self, partitions: Mapping[str, str]) -> dict[str, str]:
        """slot -> hold job id for the slots whose hold started running within `start_s`; a slot
        missing from the answer was not held (a job took it first): its hold is cancelled."""
        jobs = {slot: self.cli.run(hold_argv(slot, part)).strip().split(";")[0] for slot, part in partitions.items()}
        deadline = self.clock() + self.start_s
        states = self._states(list(jobs.values()))
        while any(states.get(j) == "PENDING" for j in jobs.values()) and self.clock() < deadline:
            self.sleep(0.3)
            states = self._states(list(jobs.values()))
        held = {s: j for s, j in jobs.items() if states.get(j) == "RUNNING"}
        self.release({s: j for s, j in jobs.items() if s not in held})
        return held

    def lost(self, holds: Mapping[str, str]) -> list[str]:
        """The held slots whose hold no longer runs: preempted by a real job."""
        states = self._states(list(holds.values()))
        return sorted(s for s, j in holds.items() if states.get(j) != "RUNNING")

    def release(self, holds: Mapping[str, str]) -> None:
        """Cancel the holds and wait until they are gone, so the nodes read idle again, not completing."""
        jobs = list(holds.values())
        if not jobs:
            return
        states = self._states(jobs)
        ending = [j for j in jobs if states.get(j, "CANCELLED") not in GONE]  # a preempted one is gone already
        if ending:
            self.cli.run(["scancel", *ending])
        deadline = self.clock() + self.start_s
        while self.clock() < deadline:
            if all(self._states(jobs).get(j, "CANCELLED") in GONE for j in jobs):
                nodes = ",".join(sorted(holds))
                shown = self.cli.run(["sinfo", "-h", "-N", "-n", nodes, "-o", "%T"]).lower()
                if "completing" not in shown:
                    return
            self.sleep(0.3)
        raise PoolError(f"the patrol's holds {', '.join(jobs)} did not end within {self.start_s:g} s of scancel")
