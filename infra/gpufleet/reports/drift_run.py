"""Run the drift report's layers over one stack's sources; each check that cannot run becomes the
layer's error (never a clean result), and the others still run.

Only `GpufleetError` (a failed call, a refused configuration) and `OSError` (an unreadable file)
are caught per check: anything else is a bug and stops the command with its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from gpufleet.errors import GpufleetError
from gpufleet.plan.model import ClusterPlan
from gpufleet.project import Project
from gpufleet.reports import drift_cloud as dc
from gpufleet.reports.audit_run import collect_audit
from gpufleet.reports.drift import LAYERS, BlockHistory, DriftReport, Finding, Layer, LayerResult, layer_result, skipped
from gpufleet.reports.drift_performance import DEFAULT_WINDOW, REGRESSION, block_history, regressions
from gpufleet.reports.drift_software import CHECK_MODE, VERSIONS, check_mode_findings, version_findings
from gpufleet.reports.sources import DEFAULT_EXPIRY_WARNING, Sources
from gpufleet.spec import CapacityType, ClusterSpec


@dataclass(frozen=True)
class DriftOptions:
    layers: tuple[Layer, ...] = LAYERS
    regression_fraction: float = 0.05
    expiry_warning: timedelta = DEFAULT_EXPIRY_WARNING
    window: int = DEFAULT_WINDOW


def reserved_capacity_ids(spec: ClusterSpec) -> tuple[str, ...]:
    """The capacity reservations or blocks the stack's instances run on (none on demand)."""
    cap = spec.cluster.capacity
    return cap.capacity_block_ids if cap.type is CapacityType.CAPACITY_BLOCK else cap.reservation_ids


class _Layer:
    """Accumulates one layer's checks, findings and errors."""

    def __init__(self, layer: Layer) -> None:
        self.layer = layer
        self.checks: list[str] = []
        self.findings: list[Finding] = []
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.history: BlockHistory | None = None

    def run(self, checks: list[str], fn: Callable[[], list[Finding]]) -> bool:
        try:
            self.findings += fn()
        except (GpufleetError, OSError) as exc:
            self.errors.append(f"{', '.join(checks)}: {exc}")
            return False
        self.checks += checks
        return True

    def result(self) -> LayerResult:
        return layer_result(self.layer, self.checks, self.findings, self.errors, self.notes, self.history)


def cloud_layer(spec: ClusterSpec, sources: Sources, now: datetime, options: DriftOptions) -> LayerResult:
    acc = _Layer(Layer.CLOUD)
    acc.run([dc.CODE_VS_STATE], lambda: dc.change_findings(
        dc.resource_changes(sources.pulumi.preview(), refresh=False), refresh=False))
    acc.run([dc.CLOUD_VS_STATE], lambda: dc.change_findings(
        dc.resource_changes(sources.pulumi.refresh(), refresh=True), refresh=True))

    def scan() -> list[Finding]:
        state = dc.state_view(sources.pulumi.export())
        found = sources.scanner.scan(state, reserved_capacity_ids(spec))
        return dc.unmanaged_findings(state, found, now, options.expiry_warning)
    acc.run([dc.ORPHAN, "sg-rules", dc.LT_MISMATCH, dc.CAPACITY], scan)
    return acc.result()


def software_layer(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str, sources: Sources,
                   now: datetime) -> LayerResult:
    acc = _Layer(Layer.SOFTWARE)
    try:  # one collection answers both checks (facts and check mode come from one run)
        report, hosts = collect_audit(spec, plan, project, stack, sources, now)
    except (GpufleetError, OSError) as exc:
        acc.errors.append(f"{VERSIONS}, {CHECK_MODE}: {exc}")
        return acc.result()
    if not report.nodes:
        acc.notes.append("No node has an instance: nothing to compare.")
    acc.run([VERSIONS], lambda: version_findings(report))
    acc.run([AUDIT_CHAIN], lambda: audit_chain_findings(project.state_dir(stack)))
    if hosts is None:
        acc.notes.append("Check mode is not available from this stack's node source.")
    else:
        acc.run([CHECK_MODE], lambda: check_mode_findings(hosts, [n.slot for n in report.nodes]))
    return acc.result()


AUDIT_CHAIN = "audit-chain"


def audit_chain_findings(state_dir: Path) -> list[Finding]:
    """The audit log's hash chain (`gpufleet history --verify`): a broken one is drift."""
    from gpufleet.ops import audit

    v = audit.verify(state_dir)
    return [] if v.ok else [Finding(layer=Layer.SOFTWARE, check=AUDIT_CHAIN, subject=audit.FILE,
                                    field=f"record {v.broken_at}", message=f"the audit log's chain breaks: {v.why}")]


def performance_layer(sources: Sources, options: DriftOptions) -> LayerResult:
    acc = _Layer(Layer.PERFORMANCE)

    def compare() -> list[Finding]:
        current = sources.baselines.current()
        if current is None:
            acc.notes.append("No baselines stored yet (no rollout has admitted a node): nothing to compare.")
            return []
        history = [h for h in sources.baselines.history() if h.taken_at < current.taken_at]
        found = regressions(current, history, options.regression_fraction, options.window)
        acc.history = block_history(current, history, [f.subject.removeprefix("block ") for f in found
                                                      if f.subject.startswith("block ")], options.window)
        sources.baselines.record(current)
        acc.notes.append(f"Baselines of {current.taken_at.isoformat()} ({len(current.nodes)} node(s), "
                         f"{len(current.blocks)} block(s), {len(current.scales)} scale(s)) against "
                         f"{len(history)} earlier snapshot(s)"
                         + (" (first snapshot: recorded, nothing to compare yet)" if not history else "")
                         + f"; threshold {options.regression_fraction:.0%} below the median of the last "
                           f"{options.window}.")
        return found
    acc.run([REGRESSION], compare)
    return acc.result()


def run_drift(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str, sources: Sources,
              options: DriftOptions, now: datetime) -> DriftReport:
    layers = []
    for layer in LAYERS:
        if layer not in options.layers:
            layers.append(skipped(layer))
        elif layer is Layer.CLOUD:
            layers.append(cloud_layer(spec, sources, now, options))
        elif layer is Layer.SOFTWARE:
            layers.append(software_layer(spec, plan, project, stack, sources, now))
        else:
            layers.append(performance_layer(sources, options))
    return DriftReport(stack=stack, generated_at=now, layers=layers)
