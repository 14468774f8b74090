"""The node-software layer's decisions: installed versions vs the BOM (the audit's comparison), and
what an Ansible check-mode run of site.yml would change on each host. Pure.

Why both: versions say *what* differs from the BOM; check mode says what configuration a converge
would touch (a hand-edited config file, a stopped service, a package held at another version),
which the version facts alone cannot see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from gpufleet.reports.audit import NOT_INSTALLED, AuditReport, RowStatus
from gpufleet.reports.drift import Finding, Layer, Severity

VERSIONS = "version"
MIXED = "mixed-versions"
NO_FACTS = "no-facts"
CHECK_MODE = "check-mode"


@dataclass(frozen=True)
class CheckModeHost:
    """One host's check-mode run: the tasks that would change, or why it did not run."""

    slot: str
    status: str  # ok | failed | unreachable
    changed: tuple[str, ...] = ()
    message: str | None = None


def version_findings(report: AuditReport) -> list[Finding]:
    """Every mismatch and missing component, every mixed group (critical), every node without facts."""
    out = [Finding(layer=Layer.SOFTWARE, check=MIXED, subject=f"{m.scope} {m.name}", field=m.component,
                   found=", ".join(f"{v} ({len(s)})" for v, s in m.versions.items()), severity=Severity.CRITICAL,
                   message=f"{m.scope} {m.name} runs {len(m.versions)} versions of {m.component}: "
                           + "; ".join(f"{v} on {', '.join(s[:3])}{' ...' if len(s) > 3 else ''}"
                                       for v, s in m.versions.items()))
           for m in report.mixed]
    for n in report.nodes:
        if not n.collected:
            out.append(Finding(layer=Layer.SOFTWARE, check=NO_FACTS, subject=n.slot, field="facts",
                               severity=Severity.HIGH, message=f"facts could not be collected: {n.error}"))
        for r in n.mismatches:
            what = "is not installed" if r.status is RowStatus.MISSING else f"is {r.installed}"
            out.append(Finding(layer=Layer.SOFTWARE, check=VERSIONS, subject=n.slot, field=r.component,
                               expected=r.expected, found=r.installed or NOT_INSTALLED, severity=Severity.HIGH,
                               message=f"{r.component} {what}, the BOM pins {r.expected}"))
    return out


def check_mode_findings(hosts: Mapping[str, CheckModeHost], slots: Sequence[str]) -> list[Finding]:
    """One finding per task a converge would change; a host the run did not reach or that failed
    is a finding too (its configuration is unknown, never assumed clean)."""
    out = []
    for slot in slots:
        h = hosts.get(slot)
        if h is None or h.status != "ok":
            why = "no result" if h is None else f"{h.status}: {h.message or 'no message'}"
            out.append(Finding(layer=Layer.SOFTWARE, check=CHECK_MODE, subject=slot, field="host",
                               severity=Severity.HIGH, message=f"the check-mode run did not complete here ({why})"))
            continue
        for task in h.changed:
            out.append(Finding(layer=Layer.SOFTWARE, check=CHECK_MODE, subject=slot, field=task,
                               expected="unchanged", found="would change", severity=Severity.MEDIUM,
                               message=f"site.yml in check mode would change: {task}"))
    return out
