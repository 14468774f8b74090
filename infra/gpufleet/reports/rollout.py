"""The rollout report: one versioned JSON document (Markdown, JUnit and HTML render from it).

Why built from the folded journal and the plan only: the report of a resumed rollout must equal
the report of an uninterrupted one, and the journal is the only source of truth.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.verdict import CheckResult
from gpufleet.plan.model import ClusterPlan
from gpufleet.reports.rollout_document import rollout_document
from gpufleet.reports.rollout_model import (AcceptanceLine, BatchLine, EarlierAttempt, PartitionLine, Quarantine,
                                            Replacement, ResizeLine, RolloutReport)
from gpufleet.reports.write import write_report
from gpufleet.rollout.display import key_figures
from gpufleet.rollout.state import ACCEPTANCE_STAGES, NodeStage, RolloutState, StageStatus
from gpufleet.rollout.timeline import Window, rollout_timeline


def acceptance_lines(state: RolloutState) -> list[AcceptanceLine]:
    """Every acceptance stage in run order, those the journal never heard of as `not-run`."""
    lines = []
    for name in ACCEPTANCE_STAGES:
        a = state.acceptance.get(name)
        if a is None:
            lines.append(AcceptanceLine(stage=name, status="not-run"))
            continue
        outcome = a.outcome or {}
        checks = outcome.get("checks", [])
        lines.append(AcceptanceLine(
            stage=name, status=a.status.value, verdict=outcome.get("verdict"), attempts=a.attempt,
            reason_codes=a.reason_codes, seconds=a.duration_s, timing=a.timing if a.status.decided else None,
            bundle=a.bundle, figures=key_figures(name, checks) if a.status is StageStatus.PASSED else "",
            imported_from=a.imported, reason=a.reason, earlier=[EarlierAttempt(**f) for f in a.failures],
            checks=[CheckResult.model_validate(c) for c in checks]))
    return lines


def build(plan: ClusterPlan, state: RolloutState, stack: str, pipelining: bool, short: list[str],
          wall_seconds: float | None = None, now: datetime | None = None,
          window: Window | None = None) -> RolloutReport:
    """`window`: the concurrency budget the rollout ran under (None: one batch at a time)."""
    gpus = plan.topology.gpus_per_node
    admitted = {s for s, n in state.nodes.items() if n.stage is NodeStage.ADMITTED}
    partitions = []
    name_of = {s.index: s.name for s in plan.nodes}  # by node index: a shrunk plan's positions have gaps
    for p in plan.partitions:
        units = [u for u in plan.units if u.partition == p.name]
        ok = [u for u in units if all(name_of.get(i) in admitted for i in u.nodes)]
        partitions.append(PartitionLine(name=p.name, units_planned=len(units), units_available=len(ok),
                                        gpus_available=len(ok) * plan.topology.unit_gpus))
    batches, quarantines, replacements = [], [], []
    for b in plan.batches:
        bs = state.batches.get(b.number)
        nodes = [state.nodes[s.name] for s in plan.batch_nodes(b.number) if s.name in state.nodes]
        batches.append(BatchLine(
            number=b.number, canary=b.canary, stage=bs.stage.value if bs else "pending", nodes=b.node_count,
            admitted=sum(1 for n in nodes if n.stage is NodeStage.ADMITTED),
            quarantined=sum(1 for n in nodes if n.stage is NodeStage.QUARANTINED),
            first_failure_rate=round(len(bs.first_failures) / b.node_count, 4) if bs and b.node_count else 0.0,
            seconds={k: round(v, 1) for k, v in (bs.durations if bs else {}).items()},
            link_faults=list(bs.link_faults) if bs else [], reason=bs.reason if bs else ""))
    for slot, n in sorted(state.nodes.items()):
        instances = [h for h in n.history if h[0] == "provisioned"]
        q_events = [h for h in n.history if h[0] == "quarantined"]
        for i, (_, iid, code) in enumerate(q_events):
            last = i == len(q_events) - 1
            quarantines.append(Quarantine(slot=slot, instance_id=iid, batch=n.batch, reason_code=code or "",
                                          reason=n.reason if last else "",
                                          replaced=not (last and n.stage is NodeStage.QUARANTINED),
                                          blacklisted=n.blacklisted and last))
        for old, new in zip(instances, instances[1:], strict=False):
            replacements.append(Replacement(slot=slot, old_instance=old[1], new_instance=new[1]))
    t = rollout_timeline(state, pipelining, window)
    status = ("halted" if state.halted else "short" if state.finished and short
              else "complete" if state.finished else "in-progress")
    links = [p for b in batches for p in b.link_faults]
    return RolloutReport(
        stack=stack, generated_at=now or datetime.now(timezone.utc), status=status, halt_reason=state.halt_reason,
        instance_type=plan.instance_type, target_nodes=len(plan.nodes), target_gpus=len(plan.nodes) * gpus,
        admitted_nodes=len(admitted), admitted_gpus=len(admitted) * gpus, spare_nodes=plan.topology.spare_nodes,
        spares_used=state.spares_used, partitions=partitions, batches=batches,
        acceptance=acceptance_lines(state), quarantined=quarantines,
        replacements=replacements, link_faults=links, short=short, timeline=t.to_dict(), pipelining=pipelining,
        wall_seconds=wall_seconds, resizes=[ResizeLine(**r) for r in state.resizes])


def write(report: RolloutReport, records: list[AdmissionRecord], directory: Path) -> list[Path]:
    """`rollout.json` (this model), `rollout.md`, `rollout-junit.xml` and `rollout.html`, each
    rendered from the report's Document (`gpufleet.reports.rollout_document`) and written atomically."""
    return list(write_report(rollout_document(report, records), report, directory, "rollout").values())
