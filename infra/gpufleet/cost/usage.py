"""What a scheduler says a job held: the one shape `sacct` lines and Kueue Workloads both become.

Why one shape: the report (GPU-hours per partition, team and job, idle units, low utilisation)
must not care which scheduler the pool runs; each source's parser maps to `JobUsage` once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from gpufleet.cost.intervals import Interval, clip


@dataclass(frozen=True)
class JobUsage:
    job_id: str  # Slurm: 123, 123_4 (array task), 123+1 (het component); Kubernetes: namespace/workload
    name: str
    team: str  # Slurm account; Kubernetes: the workload's team label, else its namespace
    partition: str
    gpus: int  # GPUs the allocation held (all nodes together)
    start: datetime  # timezone-aware
    end: datetime | None  # None: still running
    state: str
    nodes: tuple[str, ...] = ()  # slots it ran on; empty when the source does not say

    @property
    def running(self) -> bool:
        return self.end is None


@dataclass(frozen=True)
class Window:
    """The report's time range (timezone-aware); jobs still running are ended at the report's `now`."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        for t in (self.start, self.end):
            if t.tzinfo is None:
                raise ValueError(f"window time {t.isoformat()} has no time zone")
        if self.end <= self.start:
            raise ValueError(f"window ends ({self.end.isoformat()}) before it starts ({self.start.isoformat()})")

    @property
    def seconds(self) -> Interval:
        return (self.start.timestamp(), self.end.timestamp())

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


def held(job: JobUsage, window: Window, now: datetime) -> Interval | None:
    """The epoch-second interval the job held its GPUs inside the window (a running job until now).
    A job that started and ended in the same second (sacct's resolution) ran all the same: inside
    the window it is the empty interval at its start, so it is counted with 0 GPU-hours, not dropped."""
    start, end = job.start.timestamp(), (job.end if job.end is not None else now).timestamp()
    if end <= start:
        lo, hi = window.seconds
        return (start, start) if lo <= start < hi else None
    return clip((start, end), window.seconds)


def gpu_hours(job: JobUsage, window: Window, now: datetime) -> float:
    span = held(job, window, now)
    return 0.0 if span is None else job.gpus * (span[1] - span[0]) / 3600


def utc(text: str) -> datetime:
    """An ISO time; naive means UTC (sacct is run with TZ=UTC, Kubernetes writes Z)."""
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


_RELATIVE = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: datetime) -> datetime:
    """`--since`/`--until`: an ISO date or time (UTC when no offset) or an age before now (`90m`,
    `12h`, `30d`, `2w`). ValueError with what was expected."""
    t = text.strip()
    if len(t) >= 2 and t[:-1].isdigit() and t[-1] in _RELATIVE:
        return now - timedelta(seconds=int(t[:-1]) * _RELATIVE[t[-1]])
    try:
        return utc(t)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO date or time, nor an age like 30d, 12h, 90m or 2w") from None
