"""fio's `--output-format=json`: per-job bandwidth, IOPS and completion-latency percentiles.

Why per job and summed here: the storage base check runs one job per client (`numjobs`, no
`group_reporting`), and the file system's throughput is the sum of what the clients moved; a
job that reports `error != 0` is a failed client, never a slow one. The metadata engines
(`filecreate`, `filestat`, `filedelete`) report one "read" I/O per file operation, so their
IOPS are metadata operations per second.
"""

from __future__ import annotations

import json

from gpufleet.gates.parsers.common import ParseModel


class FioDirection(ParseModel):
    io_bytes: int
    bw_bytes: float  # bytes per second
    iops: float
    runtime_ms: int
    clat_p50_ns: float | None = None
    clat_p99_ns: float | None = None


class FioJob(ParseModel):
    name: str
    error: int
    read: FioDirection
    write: FioDirection


class FioRun(ParseModel):
    version: str | None = None
    jobs: tuple[FioJob, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def failed_jobs(self) -> tuple[FioJob, ...]:
        return tuple(j for j in self.jobs if j.error)

    def bw_bytes(self, direction: str) -> float:
        """Aggregate bandwidth: the sum over jobs (each job is one client or one shard)."""
        return sum(getattr(j, direction).bw_bytes for j in self.jobs)

    def iops(self, direction: str) -> float:
        return sum(getattr(j, direction).iops for j in self.jobs)

    def io_bytes(self, direction: str) -> int:
        return sum(getattr(j, direction).io_bytes for j in self.jobs)

    def runtime_s(self, direction: str) -> float:
        """Wall time of the slowest job: parallel shards finish when the last one does."""
        return max((getattr(j, direction).runtime_ms for j in self.jobs), default=0) / 1000

    def clat_p99_ns(self, direction: str) -> float | None:
        values = [v for j in self.jobs if (v := getattr(j, direction).clat_p99_ns) is not None]
        return max(values) if values else None


def _percentile(clat: dict, key: str) -> float | None:
    pct = clat.get("percentile") if isinstance(clat, dict) else None
    if not isinstance(pct, dict):
        return None
    value = pct.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _direction(d: object) -> FioDirection:
    d = d if isinstance(d, dict) else {}
    clat = d.get("clat_ns") or {}
    return FioDirection(io_bytes=int(d.get("io_bytes") or 0), bw_bytes=float(d.get("bw_bytes") or 0),
                        iops=float(d.get("iops") or 0), runtime_ms=int(d.get("runtime") or 0),
                        clat_p50_ns=_percentile(clat, "50.000000"), clat_p99_ns=_percentile(clat, "99.000000"))


def parse_json(text: str) -> FioRun:
    """One fio JSON document; fio may print warnings before it (`fio: ...` lines), which are skipped."""
    start = text.find("{")
    if start < 0:
        return FioRun(problems=(f"no JSON object in fio output: {text.strip()[:120]!r}",))
    try:
        doc = json.loads(text[start:])
    except (json.JSONDecodeError, RecursionError) as exc:
        return FioRun(problems=(f"invalid fio JSON: {exc}",))
    try:
        return _read(doc)
    except (AttributeError, TypeError, ValueError) as exc:  # a value of a shape fio never writes
        return FioRun(problems=(f"unreadable fio JSON: {type(exc).__name__}: {exc}"[:300],))


def _read(doc: dict) -> FioRun:
    jobs: list[FioJob] = []
    problems: list[str] = []
    for raw in doc.get("jobs") or []:
        if not isinstance(raw, dict) or "jobname" not in raw:
            problems.append(f"job without a jobname: {str(raw)[:80]}")
            continue
        jobs.append(FioJob(name=str(raw["jobname"]), error=int(raw.get("error") or 0),
                           read=_direction(raw.get("read")), write=_direction(raw.get("write"))))
    if not jobs:
        problems.append("no jobs in fio output")
    return FioRun(version=doc.get("fio version"), jobs=tuple(jobs), problems=tuple(problems))


def merge_outputs(texts: list[str]) -> str:
    """One document from the fio JSON of several client nodes (their jobs side by side).

    Why: the storage base check runs the same job on each client at once (one srun step over
    the clients); the file system's throughput is the sum over all of them, so the bundle keeps
    one file per test with every client's jobs in it.
    """
    jobs: list = []
    version = None
    for text in texts:
        start = text.find("{")
        doc = json.loads(text[start:]) if start >= 0 else {}
        version = version or doc.get("fio version")
        jobs.extend(doc.get("jobs") or [])
    return json.dumps({"fio version": version, "jobs": jobs})
