"""Multi-node baselines: the gates' isolation rounds run as real nccl-tests jobs through the pool's
launcher, each run judged against the multi-node floor for its SKU and node count.

Why the launcher and the real parser: the same `all_reduce_perf` output that an `srun` or an
MPIJob prints is parsed by `gpufleet.gates.parsers.nccl_tests` whether it came from a Slurm
cluster or the simulator's fabric model. A run carries its ranks and nodes: when the output lists
its ranks ("#  Rank  3 Group 0 Pid ... on HOST device ..."), a run over fewer ranks or hosts than
the spec asked for fails, since it would measure a smaller job. Per-scale figures (pairs,
groups of 4, 8, ... nodes, the batch-wide ring) become the stack's communication baseline, the
reference that later drift reports compare against.
"""

from __future__ import annotations

import json
import re
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from gpufleet.durable import write_atomic
from gpufleet.errors import PoolError
from gpufleet.gates import baseline as gbaseline
from gpufleet.gates.isolation import Group, IsolationResult, isolate
from gpufleet.gates.launch import Kind, round_specs
from gpufleet.gates.parsers.nccl_tests import parse_text
from gpufleet.gates.settings import GateSettings
from gpufleet.pool.protocol import LaunchResult, Launcher

BASELINE_SCHEMA_VERSION = 1
LAUNCH_KIND: Mapping[str, Kind] = {"slurm": "slurm", "kubernetes": "kubernetes", "sim": "slurm"}
_RANK_LINE = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")


class MultiNodeRun(BaseModel):
    """One all_reduce run over several nodes, as judged."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    nodes: tuple[str, ...]
    ranks: int
    busbw_gbs: float | None
    floor_gbs: float
    passed: bool
    problem: str = ""
    measured: bool = False  # busbw is trustworthy: exit 0, the ranks asked for, no wrong results
    seconds: float = 0.0

    @property
    def scale(self) -> int:
        return len(self.nodes)


def ranks_and_hosts(output: str) -> tuple[int, set[str]] | None:
    """(ranks, hosts) from nccl-tests' "Using devices" lines; None when the output has none."""
    ranks: set[int] = set()
    hosts: set[str] = set()
    for m in _RANK_LINE.finditer(output):
        ranks.add(int(m.group(1)))
        hosts.add(m.group(2))
    return (len(ranks), hosts) if ranks else None


def judge(result: LaunchResult, nodes: Sequence[str], ranks: int, settings: GateSettings) -> MultiNodeRun:
    """Parse one launcher result with the gates' parser and judge it against the floor for its node count."""
    nodes = tuple(nodes)
    floor = settings.busbw_floor(len(nodes))
    seconds = max(0.0, (result.ended - result.started).total_seconds())
    common = dict(name=result.name, nodes=nodes, ranks=ranks, floor_gbs=floor, seconds=seconds)
    if tuple(result.nodes) != nodes:
        raise PoolError(f"the launcher answered run {result.name} with nodes {list(result.nodes)}, "
                        f"not the spec's {list(nodes)}")
    if result.exit_code != 0:
        return MultiNodeRun(busbw_gbs=None, passed=False, problem=f"exit code {result.exit_code}", **common)
    perf = parse_text(result.output)
    seen = ranks_and_hosts(result.output)
    if seen is not None:
        got_ranks, hosts = seen
        if got_ranks != ranks:
            return MultiNodeRun(busbw_gbs=None, passed=False, problem=f"ran {got_ranks} ranks, expected {ranks}",
                                **{**common, "ranks": got_ranks})
        if len(hosts) != len(nodes):  # hostnames are the OS's (ip-10-0-0-4), not slot names: count them
            return MultiNodeRun(busbw_gbs=None, passed=False,
                                problem=f"ran on {len(hosts)} host(s) {sorted(hosts)}, expected {len(nodes)}", **common)
    busbw = gbaseline.large_message_busbw(perf, settings.baseline_min_bytes)
    if perf.wrong_total:
        return MultiNodeRun(busbw_gbs=busbw, passed=False, problem=f"#wrong {perf.wrong_total}", **common)
    if busbw is None:
        return MultiNodeRun(busbw_gbs=None, passed=False,
                            problem="; ".join(perf.problems) or "no row at or above the baseline size", **common)
    return MultiNodeRun(busbw_gbs=busbw, passed=busbw >= floor, measured=True,
                        problem="" if busbw >= floor else f"{busbw:g} GB/s below the floor {floor:g}", **common)


class NetworkRunner:
    """Runs rounds of disjoint groups through the launcher and keeps every judged run."""

    def __init__(self, launcher: Launcher, kind: Kind, settings: GateSettings, versions: Mapping[str, str],
                 message_bytes: int, timeout_s: float = 1800.0) -> None:
        self.launcher, self.kind, self.settings = launcher, kind, settings
        self.versions, self.message_bytes, self.timeout_s = dict(versions), message_bytes, timeout_s
        self.runs: list[MultiNodeRun] = []
        self.seconds = 0.0  # rounds run one after another; a round lasts as long as its slowest run

    def round(self, groups: Sequence[Group]) -> list[MultiNodeRun]:
        if not groups:
            return []
        specs = round_specs(groups, self.kind, self.settings.sku, self.versions, self.message_bytes,
                            srun_mpi=self.settings.srun_mpi)
        results = self.launcher.run(specs, self.timeout_s)
        if len(results) != len(specs):
            raise PoolError(f"the launcher returned {len(results)} results for {len(specs)} runs")
        judged = [judge(r, s.nodes, s.ranks, self.settings) for r, s in zip(results, specs, strict=True)]
        self.runs.extend(judged)
        self.seconds += max((j.seconds for j in judged), default=0.0)
        return judged

    def busbw_round(self, groups: Sequence[Group]) -> list[float]:
        """isolation's `run_round`: a failed run counts as 0 GB/s so it fails every floor."""
        return [j.busbw_gbs if j.measured and j.busbw_gbs is not None else 0.0 for j in self.round(groups)]


def run_network_gates(runner: NetworkRunner, batch: Sequence[str], admitted: Sequence[str],
                      scales: bool = True) -> IsolationResult:
    """The isolation schedule over the batch (pairs, re-pairing with admitted nodes, a ring into
    admitted nodes, bisection), then one round per scale (4, 8, ... nodes) over the cleared nodes."""
    settings = runner.settings
    ring_size = len(batch) + min(2, len(admitted))
    result = isolate(batch, admitted, runner.busbw_round, floor=settings.busbw_floor(2),
                     ring_floor=settings.busbw_floor(max(3, ring_size)), group_floor=settings.busbw_floor)
    if scales:
        good = [n for n in batch if n in set(result.good)]
        size = 4
        while size < len(good):
            runner.round([tuple(good[i:i + size]) for i in range(0, len(good) - size + 1, size)])
            size *= 2
    return result


def scale_summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per node count: runs, passed, median/min/max busbw, the floor."""
    by: dict[int, list[Mapping[str, Any]]] = {}
    for r in runs:
        by.setdefault(len(r["nodes"]), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for scale in sorted(by):
        rs = by[scale]
        values = [r["busbw_gbs"] for r in rs if r.get("busbw_gbs") is not None]
        out[str(scale)] = {
            "runs": len(rs), "passed": sum(1 for r in rs if r["passed"]), "floor_gbs": rs[0]["floor_gbs"],
            "median_gbs": round(statistics.median(values), 2) if values else None,
            "min_gbs": min(values) if values else None, "max_gbs": max(values) if values else None,
        }
    return out


def write_communication_baseline(path: Path, stack: str, instance_type: str, batches: Mapping[int, Any],
                                 updated_at: datetime) -> dict[str, Any]:
    """`<state_dir>/baselines/communication.json`: per-scale figures of every gated batch, versioned.

    Derived from the journal (rewritten whole, atomically), so it can always be rebuilt."""
    all_runs: list[Mapping[str, Any]] = []
    per_batch: dict[str, Any] = {}
    for number, b in sorted(batches.items()):
        runs = [r for rs in b.scales.values() for r in rs]
        if not runs:
            continue
        all_runs.extend(runs)
        per_batch[str(number)] = {"scales": scale_summary(runs), "link_faults": [list(p) for p in b.link_faults]}
    doc = {"schema_version": BASELINE_SCHEMA_VERSION, "stack": stack, "instance_type": instance_type,
           "updated_at": updated_at.isoformat(), "scales": scale_summary(all_runs), "batches": per_batch}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(doc, indent=2, sort_keys=True))  # fsynced: a kill never loses a batch's entry
    return doc
