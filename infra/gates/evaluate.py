"""Gate a cohort of bundles: per-node checks, then the cohort-relative baseline, then verdicts.

Why a cohort step: the relative busbw gate needs every node's figure (research section d);
everything else is per node. Pure: takes Bundles in memory, returns records.
"""

from __future__ import annotations

import gc
import statistics
from contextlib import contextmanager
from datetime import datetime
from typing import Mapping, Sequence

from infra.gates import baseline
from infra.gates.admission import AdmissionRecord, BusbwFigures
from infra.gates.bundle import Bundle
from infra.gates.checks import run_checks
from infra.gates.settings import GateSettings
from infra.gates.verdict import CheckResult, NodeOutcome, node_outcome


def settings_for(bundle: Bundle, base: GateSettings, instance_type: str | None) -> GateSettings:
    """--instance-type wins; else the manifest's; else the base settings' default."""
    it = instance_type or bundle.manifest.instance_type or base.instance_type
    return base if it == base.instance_type else base.model_copy(update={"instance_type": it})


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


def gate_cohort(bundles: Sequence[Bundle], base: GateSettings, instance_type: str | None = None,
                previous: Mapping[str, NodeOutcome] | None = None,
                decided_at: datetime | None = None) -> list[AdmissionRecord]:
    with _without_gc_passes():
        return _gate_cohort(bundles, base, instance_type, previous, decided_at)


def _gate_cohort(bundles: Sequence[Bundle], base: GateSettings, instance_type: str | None,
                 previous: Mapping[str, NodeOutcome] | None, decided_at: datetime | None) -> list[AdmissionRecord]:
    previous = previous or {}
    # Why not keep the NodeEvidence: its parsed views are ~100s of objects per node; holding them
    # for the whole cohort makes every full GC pass walk them (measured: a third of the gate time).
    per_node: list[tuple[Bundle, GateSettings, list[CheckResult], float | None]] = []
    for b in bundles:
        s = settings_for(b, base, instance_type)
        ev, results = run_checks(b, s)
        busbw = baseline.large_message_busbw(ev.intra, s.baseline_min_bytes) if ev.intra is not None else None
        per_node.append((b, s, results, busbw))
    # cohort = same instance type (and the same software manifest, which the version checks enforce)
    by_type: dict[str, dict[str, float]] = {}
    for b, s, _, bw in per_node:
        if bw is not None:
            by_type.setdefault(s.instance_type, {})[b.slot] = bw
    relative: dict[str, CheckResult] = {}
    medians: dict[str, float] = {}
    for it, figures in by_type.items():
        relative.update(baseline.cohort_outliers(figures, base.cohort_outlier_fraction, base.cohort_min_size))
        medians[it] = statistics.median(figures.values())
    records = []
    for b, s, results, bw in per_node:
        if b.slot in relative:
            results = results + [relative[b.slot]]
        outcome = node_outcome(results, previous.get(b.slot))
        m = b.manifest
        starts = [r.started for r in m.files.values() if r.started]
        ends = [r.ended for r in m.files.values() if r.ended]
        extra = {"decided_at": decided_at} if decided_at else {}
        records.append(AdmissionRecord(
            slot=b.slot, instance_id=m.instance_id, instance_type=s.instance_type, stack=m.stack, batch=m.batch,
            block=m.block, bom_digest=s.bom_digest, verdict=outcome.verdict, action=outcome.action,
            attempt=outcome.attempt, reason_codes=outcome.reason_codes, message=outcome.message,
            checks=tuple(results),
            busbw=BusbwFigures(intra_node_gbs=bw, intra_node_floor_gbs=s.intra_floor,
                               cohort_median_gbs=medians.get(s.instance_type)),
            collected_started=min(starts) if starts else None, collected_ended=max(ends) if ends else None,
            **extra))
    return records
