"""`gpufleet ops breaker status|reset -s STACK`: the day-two circuit breaker (`gpufleet.daytwo.breaker`).

Exit codes: `status` 0 closed, 3 open; `reset` 0 closed it, 2 no reason given or nothing to reset.
A reset is journaled with who and why, audited ("breaker reset") and paged, so the people who were
paged for the trip hear that automation acts again.
"""

from __future__ import annotations

import click

from gpufleet.errors import GateFailed, UsageError


@click.group("breaker")
def breaker() -> None:
    """The circuit breaker that stops automatic quarantine and remediation in a storm."""


@breaker.command("status")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
def status(stack: str) -> None:
    """Show the breaker: closed, or open with its trip (exit 3 while open)."""
    from gpufleet.daytwo import breaker as b
    from gpufleet.daytwo.context import open_day_two

    with open_day_two(stack, "ops breaker status", pool_only=True) as d:
        state = d.journal.state
        policy = b.Policy.from_ops(d.spec.ops)
        recent = sorted(b.taken(state, d.journal.now(), policy.window))
    click.echo(f"{stack}: {b.describe(state)}")
    click.echo(f"  window {int(policy.window.total_seconds() // 60)} min; limits: {policy.partition_share:.0%} of a "
               f"partition (at least 1 node), {policy.fleet_share:.0%} of the fleet; taken out automatically in the "
               f"window: {len(recent)}{' (' + ', '.join(recent[:10]) + ')' if recent else ''}")
    if state.breaker.open:
        raise GateFailed(f"the circuit breaker of {stack} is open")


@breaker.command("reset")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--reason", default="", help="Why automation may act again (required; journaled and audited).")
@click.option("--force-unlock", is_flag=True, help="Take the stack's lock from a run on another host that is gone.")
def reset(stack: str, reason: str, force_unlock: bool) -> None:
    """Close an open breaker, by hand, with a reason: automatic quarantine and remediation resume."""
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.ops import audit
    from gpufleet.ops.actions import page
    from gpufleet.ops.webhook import Page

    why = " ".join(reason.split())
    if not why:
        raise UsageError("a breaker reset needs a reason", field="--reason",
                         expected="why automation may act again, in a few words")
    with open_day_two(stack, "ops breaker reset", pool_only=True, force_unlock=force_unlock) as d:
        b = d.journal.state.breaker
        if not b.open:
            raise UsageError(f"the circuit breaker of {stack} is closed: nothing to reset", field="--stack",
                             expected="a stack whose breaker tripped (`gpufleet ops breaker status`)")
        tripped = dict(b.tripped or {})
        d.journal.append({"type": "breaker", "to": "reset", "who": d.who, "why": why})
        audit.record(d.state_dir, stack, "breaker reset", why, who=d.who,
                     details={"tripped_at": tripped.get("at"), "scope": tripped.get("scope")})
        page([Page("CircuitBreakerReset", None, f"reset by {d.who}: {why}", {"tripped": tripped})], stack,
             d.spec.ops.page_command)
    click.echo(f"{stack}: circuit breaker closed by {d.who} ({why}); the window restarts now")


def breaker_summary(stack: str) -> dict[str, object]:
    """The breaker's state for `gpufleet pool` (read without the stack's lock, as the pool listing is):
    {"open": bool, "line": one line, "tripped": the trip event or None}."""
    from gpufleet.daytwo import breaker as b
    from gpufleet.daytwo.journal import DayTwoJournal, daytwo_store
    from gpufleet.project import current_project
    from gpufleet.rollout.backends import open_backend
    from gpufleet.rollout.lock import LockInfo
    from gpufleet.spec import load_stack_path

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    state_dir = project.state_dir(stack)
    store, _lock = open_backend(spec.rollout.state_backend, state_dir, stack, LockInfo.mine(stack, "pool"),
                                region=spec.cluster.region)
    journal = DayTwoJournal(daytwo_store(store, state_dir, stack), stack)
    try:
        state = journal.load(repair=False)
    finally:
        journal.close()
        store.close()
    return {"open": state.breaker.open, "line": b.describe(state), "tripped": state.breaker.tripped}
