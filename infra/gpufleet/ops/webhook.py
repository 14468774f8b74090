"""What an Alertmanager notification does to the pool: a pure decision, no I/O.

Payload: Alertmanager's webhook format, version 4 (prometheus.io/docs/alerting/latest/configuration
/#webhook_config): `{version, groupKey, truncatedAlerts, status, receiver, groupLabels,
commonLabels, commonAnnotations, externalURL, alerts: [{status, labels, annotations, startsAt,
endsAt, generatorURL, fingerprint}]}`.

Why the budget reads the pool and not a counter: a fleet-wide alert (Prometheus lost a switch, a
bad rule) arrives as hundreds of node alerts over several notifications and restarts of this
service. Counting what the pool already holds out of work (quarantined or blacklisted, by anyone)
per partition makes the cap hold across notifications, processes and replicas: an alert may take a
node out of work only while the partition's out-of-work nodes stay within `max_quarantine_share`
of it; every other alert pages a person instead.

Why a floor for hardware-fatal alerts: `floor(share x size)` is 0 for every partition under
1/share nodes (a 5-node debug partition at 10%), so a GPU whose memory failed would stay in service
there, only paged. A hardware-fatal alert class (`HARDWARE_FATAL_ALERTS`, or an `xid` label in
`HARDWARE_FATAL_XIDS`) may always take one node of a partition out of work; the share limit applies
above that one. A storm of fatal alerts is still capped by the share (and stopped by the breaker).

Resolved alerts never re-admit: a node goes back only through its gates (`gpufleet pool readmit`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.monitoring.rules import ACTION_LABEL, NODE_LABEL, QUARANTINE
from gpufleet.pool.protocol import NodeState, PoolState

# The alert classes that mean the hardware failed, not that it needs a reset (monitoring/rules.py):
# a fatal Xid (gates/xid.py's QUARANTINE bucket), uncorrectable ECC, a failed or exhausted row remap.
HARDWARE_FATAL_ALERTS = frozenset({"GpuXidFatal", "GpuEccUncorrectable", "GpuRowRemapFailure", "GpuRowRemapExhausted"})
# Xids a source that labels the code (`xid`) reports as hardware-fatal: 48 double-bit ECC, 74 NVLink,
# 79 fallen off the bus, 95 uncontained ECC (NVIDIA Xid catalog, r590: restart or service, not a retry).
HARDWARE_FATAL_XIDS = frozenset({"48", "74", "79", "95"})
FATAL_FLOOR = 1  # nodes a partition may always give up to a hardware-fatal alert

_TAINT_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
REASON_LIMIT = 200


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Alert(_Model):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str
    endsAt: str | None = None
    generatorURL: str = ""
    fingerprint: str = ""


class Notification(_Model):
    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: str
    groupKey: str
    alerts: list[Alert]
    truncatedAlerts: int = 0
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""


@dataclass(frozen=True)
class Quarantine:
    slot: str
    reason_code: str  # the alert name, a valid taint value
    reason: str
    evidence: dict[str, Any]


@dataclass(frozen=True)
class Page:
    alertname: str
    slot: str | None
    why: str
    evidence: dict[str, Any]


@dataclass(frozen=True)
class Ignored:
    alertname: str
    slot: str | None
    why: str


@dataclass
class Decision:
    quarantine: list[Quarantine] = field(default_factory=list)
    page: list[Page] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)
    wanted: list[str] = field(default_factory=list)  # slots an alert asked to take out, within the budget or not

    def summary(self) -> dict[str, Any]:
        return {"quarantined": [q.slot for q in self.quarantine],
                "paged": [{"alertname": p.alertname, "slot": p.slot, "why": p.why} for p in self.page],
                "ignored": [{"alertname": i.alertname, "slot": i.slot, "why": i.why} for i in self.ignored]}


def reason_code(alertname: str) -> str:
    """The alert name as a quarantine reason code (a Kubernetes taint value: 63 characters, [-_.A-Za-z0-9])."""
    code = re.sub(r"[^-A-Za-z0-9_.]", "-", alertname)[:63].strip("-_.")
    return code if _TAINT_VALUE.match(code) else "alert"


def evidence(alert: Alert) -> dict[str, Any]:
    return {"labels": dict(alert.labels), "annotations": dict(alert.annotations), "startsAt": alert.startsAt,
            "fingerprint": alert.fingerprint, "generatorURL": alert.generatorURL}


def hardware_fatal(alert: Alert) -> bool:
    """Whether the alert says the hardware failed (its class, or an Xid label naming a fatal code)."""
    return (alert.labels.get("alertname") in HARDWARE_FATAL_ALERTS
            or alert.labels.get("xid", "").strip() in HARDWARE_FATAL_XIDS)


def _sizes(state: PoolState) -> tuple[Counter[str], Counter[str]]:
    size: Counter[str] = Counter()
    out: Counter[str] = Counter()
    for n in state.nodes.values():
        key = n.partition or "-"
        size[key] += 1
        if n.state in (NodeState.QUARANTINED, NodeState.BLACKLISTED):
            out[key] += 1
    return size, out


def allowance(size: int, share: float, fatal: bool) -> int:
    """Nodes of a partition of `size` that alerts may hold out of work: the share, rounded down, and
    for a hardware-fatal alert never fewer than `FATAL_FLOOR`."""
    limit = math.floor(share * size)
    return max(limit, min(FATAL_FLOOR, size)) if fatal else limit


def budget(state: PoolState, share: float, fatal: bool = False) -> dict[str, int]:
    """Per partition, how many more nodes alerts (hardware-fatal ones with `fatal`) may take out of
    work now (never below zero)."""
    size, out = _sizes(state)
    return {p: max(0, allowance(size[p], share, fatal) - out[p]) for p in size}


def decide(note: Notification, state: PoolState, share: float) -> Decision:
    """Quarantine, page or ignore each alert of one notification (see the module docstring)."""
    d = Decision()
    size, out = _sizes(state)
    taken: set[str] = set()
    for alert in sorted(note.alerts, key=lambda a: (a.labels.get(NODE_LABEL, ""), a.labels.get("alertname", ""))):
        name = alert.labels.get("alertname", "unnamed")
        slot = alert.labels.get(NODE_LABEL)
        if alert.status == "resolved":
            d.ignored.append(Ignored(name, slot, "resolved; a node returns only through its gates (gpufleet pool readmit)"))
            continue
        if alert.labels.get(ACTION_LABEL) != QUARANTINE or slot is None:
            why = "no node label" if slot is None else f"{ACTION_LABEL}={alert.labels.get(ACTION_LABEL)!r}"
            d.page.append(Page(name, slot, why, evidence(alert)))
            continue
        node = state.get(slot)
        if node is None:
            d.ignored.append(Ignored(name, slot, "not a node of this pool"))
            continue
        if node.state is not NodeState.ADMITTED or slot in taken:
            d.ignored.append(Ignored(name, slot, f"already out of work ({node.state.value})"
                                     if slot not in taken else "already quarantined by this notification"))
            continue
        part = node.partition or "-"
        d.wanted.append(slot)
        fatal = hardware_fatal(alert)
        if out[part] >= allowance(size[part], share, fatal):
            floor = f", or {FATAL_FLOOR} for a hardware-fatal alert" if fatal else ""
            d.page.append(Page(name, slot, f"partition {part} is at its alert budget ({share:.0%} out of work"
                                           f"{floor}); not quarantined", evidence(alert)))
            continue
        out[part] += 1
        taken.add(slot)
        summary = alert.annotations.get("summary", "")
        d.quarantine.append(Quarantine(slot, reason_code(name), f"alert {name}: {summary}"[:REASON_LIMIT],
                                       evidence(alert)))
    return d
