"""The running jobs on a set of nodes, as `squeue` prints them: pure parsing, no I/O.

Why this layout: a job's name is free text (blanks, pipes, even a newline), so it is the LAST
field of each row and every field before it is one Slurm cannot put a pipe in (job id, partition,
user, account, node list). A row is cut at its first five pipes and the rest is the name whole; a
line that does not start like a row continues the name of the row before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.pool.slurm.hostlist import expand_hostlist
from gpufleet.errors import PoolError

FIELDS = ("%i", "%P", "%u", "%a", "%N", "%j")  # job id, partition, user, account, nodes, name (free text, last)
SQUEUE_FORMAT = "|".join(FIELDS)
RUNNING_STATES = "RUNNING,COMPLETING"  # the states that still hold a node's resources
# 123, an array task 123_4, a heterogeneous component 123+0
_ROW = re.compile(r"^(?P<id>\d+(?:_\d+)?(?:\+\d+)?)\|(?P<partition>[^|]*)\|(?P<user>[^|]*)\|(?P<account>[^|]*)\|"
                  r"(?P<nodes>[^|]*)\|(?P<name>.*)$")


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    partition: str
    user: str
    account: str | None  # None: the cluster keeps no accounts ("(null)")
    nodes: tuple[str, ...]  # expanded from Slurm's hostlist
    name: str

    def workload(self) -> str:
        """How an operator finds it again: `<partition>/job/<id> <name> (user <u>, account <a>)`."""
        owner = f"user {self.user}" + (f", account {self.account}" if self.account else "")
        return f"{self.partition}/job/{self.job_id} {self.name} ({owner})"


def squeue_argv(hostlist: str) -> list[str]:
    """One squeue for every node of a drain (at 1,250 nodes, never one per node); `--all` so jobs in
    hidden partitions hold their nodes too."""
    return ["squeue", "--all", "-h", "-t", RUNNING_STATES, "-w", hostlist, "-o", SQUEUE_FORMAT]


def parse_squeue(text: str) -> list[RunningJob]:
    """Rows of `squeue -o SQUEUE_FORMAT`; a PoolError for output that is not that format."""
    rows: list[dict[str, str]] = []
    for line in text.removesuffix("\n").split("\n"):
        m = _ROW.match(line)
        if m:
            rows.append(m.groupdict())
        elif rows:
            rows[-1]["name"] += "\n" + line  # a name with a newline in it
        elif line.strip():
            raise PoolError(f"squeue printed {line[:120]!r}, not a `{SQUEUE_FORMAT}` row")
    jobs = []
    for r in rows:
        try:
            nodes = expand_hostlist(r["nodes"])
        except ValueError as exc:
            raise PoolError(f"squeue's node list for job {r['id']} is not a Slurm hostlist: {exc}") from None
        account = r["account"] if r["account"] not in ("", "(null)") else None
        jobs.append(RunningJob(job_id=r["id"], partition=r["partition"], user=r["user"], account=account,
                               nodes=nodes, name=r["name"]))
    return jobs
