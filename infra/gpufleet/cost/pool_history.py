"""When each slot was admitted, quarantined or out of the pool, from the stack's journals.

Why the journals and not the pool's live state: the pool says what a node is now; the report
needs what it was over the window. The rollout journal records every node transition with its
time (`nodes` events: admitted, quarantined, replaced, ...); the day-two journal records later
pool changes (`pool` events carry the state after; a `replace` leaves the old instance out until
its replacement is decided). Both are read as raw events, in order, without folding them (a
report must not refuse a journal that a newer rollout version wrote).

States: `admitted` (takes work), `quarantined` (held out of work; blacklisted counts here too,
until the slot's instance is released), `pending` (provisioned, not yet through its gates) and
`out` (no instance billed for the slot). Upgrade drains are not modelled: an upgrading group
counts as admitted.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from gpufleet.cost.intervals import Interval, clip
from gpufleet.cost.usage import utc

ADMITTED, QUARANTINED, PENDING, OUT = "admitted", "quarantined", "pending", "out"
_ROLLOUT = {"admitted": ADMITTED, "quarantined": QUARANTINED, "replaced": OUT, "provisioning": OUT,
            "provisioned": PENDING, "configuring": PENDING, "configured": PENDING, "preflight": PENDING,
            "baseline": PENDING}
_POOL_STATE = {"admitted": ADMITTED, "quarantined": QUARANTINED, "blacklisted": QUARANTINED, "pending": PENDING}

Transitions = dict[str, list[tuple[float, str]]]


def transitions(rollout_events: Iterable[Mapping[str, Any]], daytwo_events: Iterable[Mapping[str, Any]]) -> Transitions:
    """slot -> [(epoch seconds, state)] in time order, from both journals' raw events."""
    out: Transitions = {}

    def add(slot: str, at: str, state: str) -> None:
        out.setdefault(slot, []).append((utc(at).timestamp(), state))

    for e in rollout_events:
        if e.get("type") == "nodes" and e.get("to") in _ROLLOUT and e.get("at"):
            for slot in e.get("nodes") or {}:
                add(slot, e["at"], _ROLLOUT[e["to"]])
    for e in daytwo_events:
        if not e.get("at") or not e.get("slot"):
            continue
        if e.get("type") == "pool" and e.get("state") in _POOL_STATE:
            add(e["slot"], e["at"], _POOL_STATE[e["state"]])
        elif e.get("type") == "replace" and e.get("to") == "requested":
            add(e["slot"], e["at"], OUT)
        elif e.get("type") == "replace" and e.get("to") == "done" and e.get("state") in _POOL_STATE:
            add(e["slot"], e["at"], _POOL_STATE[e["state"]])
    for changes in out.values():
        changes.sort(key=lambda c: c[0])  # stable: same-time events keep journal order
    return out


def intervals_in(changes: list[tuple[float, str]], state: str, window: Interval, now: float) -> list[Interval]:
    """The slot's intervals in `state`, inside the window; the last state lasts until now."""
    found: list[Interval] = []
    for i, (at, s) in enumerate(changes):
        if s != state:
            continue
        until = changes[i + 1][0] if i + 1 < len(changes) else now
        span = clip((at, until), (window[0], min(window[1], now)))
        if span:
            if found and found[-1][1] >= span[0]:
                found[-1] = (found[-1][0], max(found[-1][1], span[1]))
            else:
                found.append(span)
    return found


def by_state(history: Transitions, state: str, window: Interval, now: float) -> dict[str, list[Interval]]:
    return {slot: spans for slot, changes in history.items() if (spans := intervals_in(changes, state, window, now))}
