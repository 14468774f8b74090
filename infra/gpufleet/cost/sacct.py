"""Slurm accounting: the `sacct` command the report runs, and the parser of its parsable output.

Why `-X -P -n` with a fixed field list: `-X` gives one line per allocation (job, array task or
heterogeneous component), never its steps, so GPUs are counted once; `-P` separates fields with
`|` and nothing else; the order below is the parser's contract. Times are asked for in UTC
(`TZ=UTC` in the command's environment), because sacct prints local time without an offset.

Lines that held nothing are skipped: a job that never started (Start `Unknown`/`None`, e.g. a
pending array `123_[5-9]`). A job still running has End `Unknown`; the report ends it at now.
GPUs come from AllocTRES `gres/gpu=N`, or the sum of the typed `gres/gpu:TYPE=N` entries when
only those are present. A JobName containing `|` shifts the columns: the extra fields are put
back into the name (every other field cannot contain one).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol, Sequence

from gpufleet.cost.usage import JobUsage, utc
from gpufleet.pool.slurm.hostlist import expand_hostlist

FIELDS = ("JobID", "JobName", "Account", "Partition", "AllocTRES", "Start", "End", "Elapsed", "State", "NodeList")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
_NO_TIME = {"Unknown", "None", ""}


class SacctError(Exception):
    """sacct could not answer (slurmdbd down, no such command): the report must say so, never 0."""


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str], env: dict[str, str]) -> tuple[int, str, str]: ...


def run_command(argv: Sequence[str], env: dict[str, str], timeout_s: float = 300) -> tuple[int, str, str]:
    """The real runner: (exit code, stdout, stderr); a missing binary is exit 127."""
    try:
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not answer within {timeout_s:.0f} s"
    return done.returncode, done.stdout, done.stderr


def sacct_argv(start: datetime, end: datetime) -> list[str]:
    return ["sacct", "-a", "-X", "-P", "-n", "--format=" + ",".join(FIELDS),
            "-S", start.astimezone(timezone.utc).strftime(TIME_FORMAT), "-E", end.astimezone(timezone.utc).strftime(TIME_FORMAT)]


def alloc_gpus(tres: str) -> int:
    """GPUs in an AllocTRES string (`billing=8,cpu=8,gres/gpu=4,mem=...,node=1`)."""
    plain, typed = None, 0
    for item in filter(None, tres.split(",")):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            plain = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return plain if plain is not None else typed


@dataclass(frozen=True)
class Skipped:
    line: int
    why: str


def parse(text: str) -> tuple[list[JobUsage], list[Skipped]]:
    """Jobs that held GPUs (or ran at all) and the lines skipped with why; a malformed line raises
    ValueError naming its line number, since silently dropping one would under-report usage."""
    jobs: list[JobUsage] = []
    skipped: list[Skipped] = []
    n = len(FIELDS)
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        cells = raw.split("|")
        if len(cells) < n:
            raise ValueError(f"sacct line {lineno}: {len(cells)} fields, expected {n} ({'|'.join(FIELDS)}): {raw!r}")
        extra = len(cells) - n
        job_id = cells[0]
        name = "|".join(cells[1:2 + extra])
        account, partition, tres, start, end, _elapsed, state, nodelist = cells[2 + extra:]
        if start in _NO_TIME:
            skipped.append(Skipped(lineno, f"job {job_id} never started ({state})"))
            continue
        try:
            jobs.append(JobUsage(job_id=job_id, name=name, team=account or "(no account)", partition=partition,
                                 gpus=alloc_gpus(tres), start=utc(start), end=None if end in _NO_TIME else utc(end),
                                 state=state.split(" ")[0], nodes=expand_hostlist(nodelist)))
        except ValueError as exc:
            raise ValueError(f"sacct line {lineno}: {exc}: {raw!r}") from None
    return jobs, skipped


class SacctSource:
    """Reads the window's allocations from slurmdbd through `sacct` (on the head node, or wherever
    SLURM_CONF points)."""

    def __init__(self, runner: CommandRunner = run_command, env: dict[str, str] | None = None) -> None:
        self.runner = runner
        self.env = dict(env if env is not None else os.environ, TZ="UTC")

    def jobs(self, start: datetime, end: datetime) -> tuple[list[JobUsage], list[Skipped]]:
        argv = sacct_argv(start, end)
        code, out, err = self.runner(argv, self.env)
        if code != 0:
            detail = (err.strip() or out.strip() or f"exit {code}").splitlines()
            raise SacctError(f"Slurm accounting unreachable: `{' '.join(argv[:5])} ...` exited {code}: "
                             + " / ".join(detail[-3:]))
        try:
            return parse(out)
        except ValueError as exc:
            raise SacctError(f"Slurm accounting answered something unreadable: {exc}") from None

