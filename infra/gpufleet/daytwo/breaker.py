"""The circuit breaker: automatic take-outs stop when too many nodes are wanted out at once, and only a
person closes it again.

Why (NVSentinel's and EKS node auto-repair's breakers): a fleet-wide symptom (a bad rule, a monitoring
outage, a switch) arrives as many node faults at once; acting on each one drains the fleet. Within
a sliding window (`ops.breakerWindowMinutes`) the breaker counts the distinct nodes automation took
out (alert quarantines, the remediation ladder's steps, patrol) plus the ones it wants out now;
more than `ops.breakerPartitionShare` of a partition (never fewer than one node: a single fatal
fault is not a storm) or `ops.breakerFleetShare` of the fleet trips it. Automation takes nodes up
to the limit, then stops: while the breaker is open, alerts page and the ladder stops before its
next step. Trips and resets are day-two journal events (`{"type": "breaker"}`), audited and paged;
`gpufleet pool` shows the state; `gpufleet ops breaker reset -s STACK --reason` closes it, and the
window restarts at the reset. Pure: the state, the clock and the pool's partitions come in.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

from gpufleet.daytwo.state import DayTwoState

AUTOMATIC = frozenset({"alert", "patrol", "remediation"})  # pool change sources that count; an operator's never
TAKE_OUT = frozenset({"quarantine", "blacklist"})
FLEET = "fleet"


@dataclass(frozen=True)
class Policy:
    partition_share: float
    fleet_share: float
    window: timedelta

    @classmethod
    def from_ops(cls, ops: Any) -> "Policy":
        """From the stack's `gpufleet:ops` (spec.OpsConfig)."""
        return cls(ops.breaker_partition_share, ops.breaker_fleet_share,
                   timedelta(minutes=ops.breaker_window_minutes))


@dataclass(frozen=True)
class Trip:
    scope: str  # "partition NAME" or "fleet"
    wanted: int  # distinct nodes taken out in the window, or wanted out now
    limit: int
    slots: tuple[str, ...]

    def reason(self, policy: Policy, stack: str) -> str:
        minutes = int(policy.window.total_seconds() // 60)
        return (f"{self.wanted} node(s) of the {self.scope} wanted out within {minutes} min, over the breaker's "
                f"limit of {self.limit}: automatic quarantine and remediation stop until `gpufleet ops breaker "
                f"reset -s {stack} --reason ...`")

    def event(self, policy: Policy, stack: str) -> dict[str, Any]:
        return {"type": "breaker", "to": "tripped", "scope": self.scope, "wanted": self.wanted, "limit": self.limit,
                "slots": list(self.slots), "reason": self.reason(policy, stack),
                "window_minutes": int(policy.window.total_seconds() // 60)}


@dataclass
class Verdict:
    allowed: list[str] = field(default_factory=list)  # of the decided take-outs, those that may go ahead
    held: list[str] = field(default_factory=list)  # the rest: page instead
    trip: Trip | None = None  # a new trip to journal, audit and page
    was_open: bool = False


def limit(size: int, share: float) -> int:
    """How many nodes of a scope of `size` automation may take out in one window (at least one)."""
    return max(1, math.floor(share * size)) if size else 0


def _when(at: str) -> datetime | None:
    try:
        return datetime.fromisoformat(at)
    except (TypeError, ValueError):
        return None


def taken(state: DayTwoState, now: datetime, window: timedelta) -> set[str]:
    """Distinct slots automation took out within the window (and after the latest reset)."""
    since = now - window
    reset = _when(state.breaker.reset_at or "")
    if reset is not None and reset > since:
        since = reset
    out = set()
    for c in state.changes:
        when = _when(c.at)
        if c.action in TAKE_OUT and c.source in AUTOMATIC and when is not None and when >= since:
            out.add(c.slot)
    return out


def _over(slots: set[str], partition_of: Mapping[str, str | None], policy: Policy) -> Trip | None:
    sizes = Counter(p or "-" for p in partition_of.values())
    by_part = Counter(partition_of.get(s) or "-" for s in slots if s in partition_of)
    for part in sorted(by_part):
        cap = limit(sizes[part], policy.partition_share)
        if by_part[part] > cap:
            mine = tuple(sorted(s for s in slots if (partition_of.get(s) or "-") == part))
            return Trip(f"partition {part}", by_part[part], cap, mine)
    fleet = {s for s in slots if s in partition_of}
    cap = limit(len(partition_of), policy.fleet_share)
    if len(fleet) > cap:
        return Trip(FLEET, len(fleet), cap, tuple(sorted(fleet)))
    return None


def admit(state: DayTwoState, partition_of: Mapping[str, str | None], policy: Policy, now: datetime,
          decided: Sequence[str], wanted: Iterable[str] = ()) -> Verdict:
    """Which of the `decided` take-outs may go ahead, in order, and whether the breaker trips now.

    `partition_of`: every pool slot and its partition. `wanted`: what automation asked for beyond
    `decided` (alerts the quarantine budget refused): demand that trips the breaker in a storm even
    when the budget already held the line."""
    if state.breaker.open:
        return Verdict(held=list(decided), was_open=True)
    out = taken(state, now, policy.window)
    trip = _over(out | set(decided) | set(wanted), partition_of, policy)
    v = Verdict(trip=trip)
    for slot in decided:
        if slot in out or _over(out | {slot}, partition_of, policy) is None:
            v.allowed.append(slot)
            out.add(slot)
        else:
            v.held = list(decided[len(v.allowed):])
            break
    return v


def describe(state: DayTwoState) -> str:
    """One line for `gpufleet pool` and `gpufleet ops breaker status`."""
    b = state.breaker
    if b.open and b.tripped is not None:
        return f"circuit breaker OPEN since {b.tripped.get('at', '?')}: {b.tripped.get('reason', '')}"
    if b.reset_at:
        return f"circuit breaker closed (reset {b.reset_at})"
    return "circuit breaker closed"
