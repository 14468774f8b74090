"""The version audit: for every node and every BOM component, expected vs installed. Pure.

Why mixed versions are the worst finding: skew inside one partition or block is what silently
costs bandwidth or breaks collectives (DESIGN.md section 1, "Consistency"), worse than a whole
partition uniformly on an unexpected version. Why nodes without facts are rows and not gaps: an
audit that skipped the nodes it could not read would report a clean pool it never saw.

Installed versions come from the node's `gpufleet` fact (playbooks/roles/node_facts) in the BOM's
key names and are compared the gates' way (`gpufleet.gates.versions.matches`): a kernel against the
BOM's family and minimum, CUDA and gdrcopy by release, the rest exactly or by prefix.

Outcome: DRIFT (exit 4) on any mismatch, mixed group or node without facts; OK (exit 0) when
every node was read and matches.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, computed_field

import gpufleet
from gpufleet.gates import versions as gv
from gpufleet.plan.model import ClusterPlan
from gpufleet.reports.document import (CaseStatus, Cell, Distribution, DistributionGroup, Document, Paragraph, Section,
                                    Status, SummaryItem, Table, TestCase, TestCases, Tone, ValueCount)

AUDIT_SCHEMA_VERSION = 1
SUITE = "gpufleet-audit"
NOT_INSTALLED = "not installed"


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class NodeFacts:
    """What one node said about itself; `versions` None when its facts could not be collected."""

    slot: str
    versions: Mapping[str, str | None] | None
    error: str | None = None


@dataclass(frozen=True)
class NodePlace:
    """Where a node sits: its instance, partition and block (from the plan and the inventory)."""

    slot: str
    instance_id: str | None
    partition: str | None
    block: int | None


class RowStatus(str, Enum):
    MATCH = "match"
    MISMATCH = "mismatch"
    MISSING = "missing"  # the component is not installed


class Row(_M):
    component: str
    expected: str
    installed: str | None
    status: RowStatus


class NodeAudit(_M):
    slot: str
    instance_id: str | None = None
    partition: str | None = None
    block: int | None = None
    collected: bool
    error: str | None = None
    rows: list[Row] = Field(default_factory=list)

    @property
    def mismatches(self) -> list[Row]:
        return [r for r in self.rows if r.status is not RowStatus.MATCH]


class MixedGroup(_M):
    """One component on more than one version inside a partition or a block."""

    scope: str  # partition | block
    name: str
    component: str
    versions: dict[str, list[str]]  # installed version -> slots


class ComponentSummary(_M):
    component: str
    expected: str
    versions: dict[str, int]  # installed version (or `not installed`) -> nodes
    uncollected: int


class AuditReport(_M):
    schema_version: int = AUDIT_SCHEMA_VERSION
    kind: str = "audit"
    stack: str
    generated_at: datetime
    os: str
    bom_digest: str
    nodes: list[NodeAudit]
    mixed: list[MixedGroup] = Field(default_factory=list)
    components: list[ComponentSummary] = Field(default_factory=list)
    gpufleet_version: str = gpufleet.__version__

    @property
    def uncollected(self) -> list[NodeAudit]:
        return [n for n in self.nodes if not n.collected]

    @property
    def mismatched(self) -> list[NodeAudit]:
        return [n for n in self.nodes if n.mismatches]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> Status:
        """In the JSON too, so a pipeline reads the outcome without re-deriving it."""
        return Status.DRIFT if (self.mixed or self.uncollected or self.mismatched) else Status.OK


# ------------------------------------------------------------------ decisions

def places(plan: ClusterPlan, instances: Mapping[str, str | None]) -> list[NodePlace]:
    """Every slot with an instance (slot -> instance id), with its partition and block from the plan;
    a slot the plan does not know is listed too, without a place."""
    partition_of = {b: p.name for p in plan.partitions for b in p.blocks}
    slots = {s.name: s for s in plan.nodes}
    out = []
    for name in sorted(instances):
        s = slots.get(name)
        out.append(NodePlace(slot=name, instance_id=instances[name], block=s.block if s else None,
                             partition=partition_of.get(s.block) if s else None))
    return out


def compare_node(versions: Mapping[str, str | None], expected: Mapping[str, str], pool: str | None) -> list[Row]:
    """One row per BOM component. With no pool agent pinned (a simulated pool), an agent the node
    does not run is not a row: the node runs one of them, never both."""
    agent = gv.agent_for(pool)
    rows = []
    for key in sorted(expected):
        found = versions.get(key)
        if found is None and agent is None and key in gv.AGENT_KEYS:
            continue
        want = gv.expected_text(key, expected[key])
        if found is None:
            rows.append(Row(component=key, expected=want, installed=None, status=RowStatus.MISSING))
        else:
            ok = gv.matches(key, expected[key], found)
            rows.append(Row(component=key, expected=want, installed=found,
                            status=RowStatus.MATCH if ok else RowStatus.MISMATCH))
    return rows


def mixed_groups(nodes: Sequence[NodeAudit]) -> list[MixedGroup]:
    """Components on more than one installed version inside one partition or one block."""
    out = []
    for scope in ("partition", "block"):
        groups: dict[str, list[NodeAudit]] = defaultdict(list)
        for n in nodes:
            key = getattr(n, scope)
            if n.collected and key is not None:
                groups[str(key)].append(n)
        for name in sorted(groups, key=lambda k: (len(k), k)):
            by_component: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
            for n in groups[name]:
                for r in n.rows:
                    by_component[r.component][r.installed or NOT_INSTALLED].append(n.slot)
            for comp in sorted(by_component):
                versions = by_component[comp]
                if len(versions) > 1:
                    out.append(MixedGroup(scope=scope, name=name, component=comp,
                                          versions={v: sorted(s) for v, s in sorted(versions.items())}))
    return out


def component_summary(nodes: Sequence[NodeAudit], expected: Mapping[str, str]) -> list[ComponentSummary]:
    out = []
    uncollected = sum(1 for n in nodes if not n.collected)
    for key in sorted(expected):
        counts = Counter(r.installed or NOT_INSTALLED for n in nodes for r in n.rows if r.component == key)
        if not counts and key in gv.AGENT_KEYS:
            continue  # an agent no node runs (the pool uses the other one)
        out.append(ComponentSummary(component=key, expected=gv.expected_text(key, expected[key]),
                                    versions=dict(sorted(counts.items())), uncollected=uncollected))
    return out


def audit(stack: str, nodes: Sequence[NodePlace], facts: Mapping[str, NodeFacts], expected: Mapping[str, str], *,
          os: str, pool: str | None, bom_digest: str, now: datetime) -> AuditReport:
    """The audit of `nodes`: a node missing from `facts` is reported as not collected."""
    audited = []
    for p in nodes:
        f = facts.get(p.slot)
        common: dict[str, Any] = dict(slot=p.slot, instance_id=p.instance_id, partition=p.partition, block=p.block)
        if f is None or f.versions is None:
            audited.append(NodeAudit(collected=False, error=(f.error if f else None) or "no facts came back", **common))
        else:
            audited.append(NodeAudit(collected=True, rows=compare_node(f.versions, expected, pool), **common))
    return AuditReport(stack=stack, generated_at=now, os=os, bom_digest=bom_digest, nodes=audited,
                       mixed=mixed_groups(audited), components=component_summary(audited, expected))


# ------------------------------------------------------------------ the neutral document

def audit_cases(report: AuditReport) -> list[TestCase]:
    """One case per node and component; a node without facts is one error case."""
    cases = []
    for n in report.nodes:
        if not n.collected:
            cases.append(TestCase(suite=SUITE, classname=f"audit.{n.slot}", name="facts", status=CaseStatus.ERROR,
                                  failure_type="NO_FACTS", message=n.error or "no facts"))
            continue
        for r in n.rows:
            bad = r.status is not RowStatus.MATCH
            cases.append(TestCase(suite=SUITE, classname=f"audit.{n.slot}", name=r.component,
                                  status=CaseStatus.FAIL if bad else CaseStatus.PASS,
                                  failure_type=r.status.value.upper() if bad else "",
                                  message=f"expected {r.expected}, found {r.installed or NOT_INSTALLED}" if bad else ""))
    return cases


def audit_document(report: AuditReport) -> Document:
    mism = report.mismatched
    unc = report.uncollected
    summary = [SummaryItem(key="nodes", value=str(len(report.nodes))),
               SummaryItem(key="mixed groups", value=str(len(report.mixed)), tone=Tone.BAD if report.mixed else Tone.GOOD),
               SummaryItem(key="nodes off the BOM", value=str(len(mism)), tone=Tone.BAD if mism else Tone.GOOD),
               SummaryItem(key="nodes without facts", value=str(len(unc)), tone=Tone.BAD if unc else Tone.GOOD),
               SummaryItem(key="BOM", value=report.bom_digest[:19]), SummaryItem(key="OS", value=report.os)]
    sections = []
    mixed_rows: list[list[Cell]] = [[m.scope, m.name, m.component,
                                     "; ".join(f"{v}: {', '.join(s[:5])}{' ...' if len(s) > 5 else ''} ({len(s)})"
                                               for v, s in m.versions.items())] for m in report.mixed]
    sections.append(Section(title="Mixed versions (worst)", blocks=[
        Table(columns=["scope", "name", "component", "versions: nodes"], rows=mixed_rows) if mixed_rows
        else Paragraph(text="No partition or block runs mixed versions.", tone=Tone.GOOD)]))
    rows: list[list[Cell]] = [[n.slot, n.instance_id, n.partition, n.block, r.component, r.expected,
                               r.installed or NOT_INSTALLED, r.status.value] for n in mism for r in n.mismatches]
    sections.append(Section(title="Nodes off the BOM", blocks=[
        Table(columns=["node", "instance", "partition", "block", "component", "expected", "installed", "status"],
              rows=rows) if rows else Paragraph(text="Every node whose facts were read matches the BOM.", tone=Tone.GOOD)]))
    unc_rows: list[list[Cell]] = [[n.slot, n.instance_id, n.partition, n.block, n.error] for n in unc]
    sections.append(Section(title="Nodes without facts", blocks=[
        Table(columns=["node", "instance", "partition", "block", "why"], rows=unc_rows) if unc_rows
        else Paragraph(text="Facts were collected from every node.", tone=Tone.GOOD)]))
    sections.append(Section(title="Versions by component", blocks=[
        Distribution(title="Installed versions per component",
                     groups=[DistributionGroup(name=c.component, expected=_expected_value(c, report),
                                               counts=[ValueCount(value=v, count=k) for v, k in c.versions.items()])
                             for c in report.components]),
        Table(columns=["component", "expected", "versions (nodes)", "without facts"],
              rows=[[c.component, c.expected, ", ".join(f"{v}: {k}" for v, k in c.versions.items()), c.uncollected]
                    for c in report.components])]))
    sections.append(Section(title="Checks", blocks=[TestCases(title="Components per node", cases=audit_cases(report))]))
    title = ("every node on the BOM" if report.status is Status.OK else
             f"{len(report.mixed)} mixed group(s), {len(mism)} node(s) off the BOM, {len(unc)} without facts")
    return Document(kind="audit", title=f"Audit of {report.stack}: {title}", stack=report.stack,
                    generated_at=report.generated_at, status=report.status, summary=summary, sections=sections)


def _expected_value(c: ComponentSummary, report: AuditReport) -> str | None:
    """The installed value that counts as expected in the distribution: the one the rows marked MATCH."""
    for n in report.nodes:
        for r in n.rows:
            if r.component == c.component and r.status is RowStatus.MATCH:
                return r.installed
    return None
