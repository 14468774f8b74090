"""Gate a cohort of bundles: per-node checks, then the cohort-relative baseline, then verdicts.

Why two steps: the relative busbw gate needs every node's figure (research section d);
everything else is per node. `check_node` is that per-node step (pure: a Bundle in, a
NodeStep out) and runs in parallel worker processes for large cohorts (`workers`); the cohort
step (`decide_cohort`) runs once, in this process, over every node's step. Serial and parallel
runs give identical records (tests/gates/test_parallel_gate.py).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping, Sequence

from gpufleet.gates import baseline
from gpufleet.gates.admission import AdmissionRecord, BusbwFigures
from gpufleet.gates.bundle import Bundle, read_bundle
from gpufleet.gates.checks import run_checks
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, NodeOutcome, node_outcome

PARALLEL_MIN_NODES = 64  # below this a worker pool costs more than it saves


def settings_for(bundle: Bundle, base: GateSettings, instance_type: str | None) -> GateSettings:
    """--instance-type wins; else the manifest's; else the base settings' default."""
    it = instance_type or bundle.manifest.instance_type or base.instance_type
    return base if it == base.instance_type else base.model_copy(update={"instance_type": it})


@dataclass(frozen=True)
class NodeStep:
    """One node's checks and figures: everything the cohort step needs, nothing it does not
    (no parsed views, no manifest: ~100s of objects per node, costly to keep or to ship back
    from a worker process)."""

    slot: str
    instance_id: str | None
    stack: str | None
    batch: int | None
    block: int | None
    collected_started: datetime | None
    collected_ended: datetime | None
    instance_type: str
    intra_floor: float
    results: tuple[CheckResult, ...]
    busbw: float | None  # large-message intra-node busbw, None when not measured


def check_node(bundle: Bundle, base: GateSettings, instance_type: str | None = None) -> NodeStep:
    s = settings_for(bundle, base, instance_type)
    ev, results = run_checks(bundle, s)
    busbw = baseline.large_message_busbw(ev.intra, s.baseline_min_bytes) if ev.intra is not None else None
    m = bundle.manifest
    starts = [r.started for r in m.files.values() if r.started]
    ends = [r.ended for r in m.files.values() if r.ended]
    return NodeStep(slot=m.slot, instance_id=m.instance_id, stack=m.stack, batch=m.batch, block=m.block,
                    collected_started=min(starts) if starts else None, collected_ended=max(ends) if ends else None,
                    instance_type=s.instance_type, intra_floor=s.intra_floor, results=tuple(results), busbw=busbw)


def decide_cohort(steps: Sequence[NodeStep], base: GateSettings, previous: Mapping[str, NodeOutcome] | None = None,
                  decided_at: datetime | None = None) -> list[AdmissionRecord]:
    """The cohort step: relative busbw per instance type, then each node's verdict and record."""
    previous = previous or {}
    # cohort = same instance type (and the same software manifest, which the version checks enforce)
    by_type: dict[str, dict[str, float]] = {}
    for st in steps:
        if st.busbw is not None:
            by_type.setdefault(st.instance_type, {})[st.slot] = st.busbw
    relative: dict[str, CheckResult] = {}
    medians: dict[str, float] = {}
    for it, figures in by_type.items():
        relative.update(baseline.cohort_outliers(figures, base.cohort_outlier_fraction, base.cohort_min_size))
        medians[it] = statistics.median(figures.values())
    extra = {"decided_at": decided_at} if decided_at else {}
    records = []
    for st in steps:
        results = list(st.results)
        if st.slot in relative:
            results.append(relative[st.slot])
        outcome = node_outcome(results, previous.get(st.slot))
        records.append(AdmissionRecord(
            slot=st.slot, instance_id=st.instance_id, instance_type=st.instance_type, stack=st.stack, batch=st.batch,
            block=st.block, bom_digest=base.bom_digest, verdict=outcome.verdict, action=outcome.action,
            attempt=outcome.attempt, reason_codes=outcome.reason_codes, message=outcome.message,
            checks=tuple(results),
            busbw=BusbwFigures(intra_node_gbs=st.busbw, intra_node_floor_gbs=st.intra_floor,
                               cohort_median_gbs=medians.get(st.instance_type)),
            collected_started=st.collected_started, collected_ended=st.collected_ended, **extra))
    return records


@contextmanager
def _without_gc_passes():
    """Pause the cyclic garbage collector for one cohort.

    Why: gating 1,250 nodes allocates ~10^5 small objects (check results, parsed rows) that all
    stay alive until the records are built, so every collector threshold crossing rescans them:
    measured at about a fifth of the gate time. The parsers and checks build no reference cycles,
    so nothing is left uncollected; the collector is restored (and runs normally) afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# What a forked worker inherits (no pickling of the inputs): the items and how to check one.
_job: tuple[Sequence[object], Callable[[object], NodeStep]] | None = None


def _run_chunk(bounds: tuple[int, int]) -> list[NodeStep]:
    assert _job is not None, "worker started without a job"
    items, step = _job
    with _without_gc_passes():
        return [step(items[i]) for i in range(*bounds)]


def _steps(items: Sequence[object], step: Callable[[object], NodeStep], workers: int | None) -> list[NodeStep]:
    """step(item) for every item, in order: in this process, or in forked worker processes."""
    n = len(items)
    workers = default_workers() if workers is None else workers
    if workers <= 1 or n < PARALLEL_MIN_NODES or "fork" not in multiprocessing.get_all_start_methods():
        return [step(x) for x in items]
    global _job
    chunk = max(16, -(-n // workers))  # one chunk per worker: pickle shares the results its nodes have in common
    bounds = [(i, min(i + chunk, n)) for i in range(0, n, chunk)]
    _job = (items, step)
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(bounds)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            return [st for part in pool.map(_run_chunk, bounds) for st in part]
    finally:
        _job = None


def gate_cohort(bundles: Sequence[Bundle], base: GateSettings, instance_type: str | None = None,
                previous: Mapping[str, NodeOutcome] | None = None, decided_at: datetime | None = None,
                workers: int | None = 1) -> list[AdmissionRecord]:
    """Gate bundles already in memory. workers=None: one process per CPU for large cohorts."""
    with _without_gc_passes():
        steps = _steps(bundles, lambda b: check_node(b, base, instance_type), workers)  # type: ignore[arg-type]
        return decide_cohort(steps, base, previous, decided_at)


def gate_folders(folders: Sequence[str | os.PathLike[str]], base: GateSettings, instance_type: str | None = None,
                 previous: Mapping[str, NodeOutcome] | None = None, decided_at: datetime | None = None,
                 workers: int | None = None, validate: Callable[[Bundle], None] | None = None
                 ) -> list[AdmissionRecord]:
    """Read and gate bundle folders, the reading and per-node checks in parallel workers.

    validate(bundle) may raise (e.g. an unknown instance type in a manifest); the error reaches
    the caller as raised.
    """
    def step(folder: object) -> NodeStep:
        b = read_bundle(Path(folder))  # type: ignore[arg-type]
        if validate is not None:
            validate(b)
        return check_node(b, base, instance_type)

    with _without_gc_passes():
        steps = _steps(list(folders), step, workers)
        return decide_cohort(steps, base, previous, decided_at)
