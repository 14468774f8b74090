"""Carry out a webhook decision: quarantine through the pool, journal it, audit it, page the rest.

Why through `open_day_two`: an alert's quarantine is a day-two pool change like an operator's; it
takes the stack's lock (so it never races a rollout: a held lock answers 503 and Alertmanager
retries), is journaled with who and why, and reads the pool state it decides on under that lock.
"""

from __future__ import annotations

import json
import logging
import subprocess
from typing import Any, Callable, Sequence

from gpufleet.ops import audit
from gpufleet.ops.webhook import Decision, Notification, Page, decide

log = logging.getLogger("gpufleet.ops")
ACTOR = "alertmanager"


def page(pages: Sequence[Page], stack: str, command: Sequence[str]) -> None:
    """Loudly log every page; with `ops.pageCommand`, run it once with the pages as JSON on stdin."""
    if not pages:
        return
    for p in pages:
        log.error("PAGE stack=%s alert=%s node=%s: %s", stack, p.alertname, p.slot, p.why)
    if command:
        doc = json.dumps({"stack": stack, "pages": [{"alertname": p.alertname, "slot": p.slot, "why": p.why,
                                                     "evidence": p.evidence} for p in pages]})
        try:
            subprocess.run(list(command), input=doc, text=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError) as exc:
            log.error("PAGE command %s failed: %s", command[0], exc)


def hold_for_breaker(d: Any, decision: Decision) -> Decision:
    """Let the circuit breaker (`gpufleet.daytwo.breaker`) pass or hold the decision's quarantines;
    a new trip is journaled, audited and paged here, and every held quarantine pages instead."""
    from gpufleet.daytwo import breaker

    state = d.pool.state()
    policy = breaker.Policy.from_ops(d.spec.ops)
    verdict = breaker.admit(d.journal.state, {s: n.partition for s, n in state.nodes.items()}, policy,
                            d.journal.now(), [q.slot for q in decision.quarantine], decision.wanted)
    if verdict.trip is not None:
        event = d.journal.append({**verdict.trip.event(policy, d.stack), "who": ACTOR})
        audit.record(d.state_dir, d.stack, "breaker trip", event["reason"], who=ACTOR,
                     details={"scope": event["scope"], "wanted": event["wanted"], "limit": event["limit"],
                              "slots": event["slots"]}, warn=log.warning)
        decision.page.append(Page("CircuitBreaker", None, event["reason"], {"slots": event["slots"]}))
    held = set(verdict.held)
    why = breaker.describe(d.journal.state) if held else ""
    decision.page.extend(Page(q.reason_code, q.slot, why, q.evidence) for q in decision.quarantine if q.slot in held)
    decision.quarantine = [q for q in decision.quarantine if q.slot not in held]
    return decision


def handle(note: Notification, stack: str, project: Any = None,
           pager: Callable[[Sequence[Page], str, Sequence[str]], None] = page) -> Decision:
    """Decide under the stack's lock and act; returns the decision (the HTTP answer reports it).
    `pager`: `ops serve` hands pages to its own thread, so a page command never holds the lock."""
    from gpufleet.daytwo.context import open_day_two

    with open_day_two(stack, "ops serve", pool_only=True, project=project) as d:
        decision = hold_for_breaker(d, decide(note, d.pool.state(), d.spec.ops.max_quarantine_share))
        for q in decision.quarantine:
            node = d.pool.quarantine(q.slot, q.reason_code, q.reason)
            d.journal.append({"type": "pool", "slot": q.slot, "action": "quarantine", "who": ACTOR, "why": q.reason,
                              "reason_code": q.reason_code, "state": node.state.value, "source": "alert",
                              "evidence": q.evidence})
            audit.record(d.state_dir, stack, "alert quarantine", q.reason, target=q.slot, who=ACTOR,
                         details={"reason_code": q.reason_code, "evidence": q.evidence}, warn=log.warning)
            log.warning("quarantined %s: %s", q.slot, q.reason)
        for i in decision.ignored:
            log.info("ignored alert %s for %s: %s", i.alertname, i.slot, i.why)
        pager(decision.page, stack, d.spec.ops.page_command)
    return decision
