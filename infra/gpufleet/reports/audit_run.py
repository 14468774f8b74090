"""Collect one stack's audit: its nodes (the fleet's inventory, placed by the plan), their facts (the
software source), and the BOM's expectations for the stack's OS and pool; the decision is
`gpufleet.reports.audit.audit`. Shared by `gpufleet audit` and the drift report's software layer.
"""

from __future__ import annotations

from datetime import datetime

from gpufleet.bom import load_bom
from gpufleet.gates import versions as gv
from gpufleet.plan.model import ClusterPlan
from gpufleet.project import Project
from gpufleet.reports.audit import AuditReport, audit, places
from gpufleet.reports.drift_software import CheckModeHost
from gpufleet.reports.sources import Sources
from gpufleet.spec import ClusterSpec


def collect_audit(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str, sources: Sources,
                  now: datetime) -> tuple[AuditReport, dict[str, CheckModeHost] | None]:
    """The audit report, and the check-mode results the same collection brought back (None when the
    source has no check mode)."""
    bom = load_bom(project.path(spec.image.bom))
    expected = gv.expectations(bom, spec.image.os, spec.pool.type)
    inventory = sources.fleet.inventory()
    facts, hosts = sources.software.collect([inventory[s] for s in sorted(inventory)])
    nodes = places(plan, {slot: inst.instance_id for slot, inst in inventory.items()})
    report = audit(stack, nodes, facts, expected, os=spec.image.os, pool=spec.pool.type, bom_digest=bom.digest(),
                   now=now)
    return report, hosts
