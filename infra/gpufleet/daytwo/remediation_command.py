"""`gpufleet ops remediation -s STACK [--json]` shows the ladder in force (the table with the stack's
override); `gpufleet ops remediation run -s STACK SLOT --reason WHY` climbs it for a quarantined node.

Exit codes: 0 shown, or the node was cured and admitted again; 3 the ladder ended in quarantine
for service or the breaker stopped it; 2 bad input (not quarantined, no reason, a bad override).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from gpufleet.changeset_command import yes_option
from gpufleet.errors import GateFailed, UsageError

if TYPE_CHECKING:
    from gpufleet.changeset import ChangeSet


def _stack(ctx: click.Context, stack: str | None) -> str:
    chosen = stack or (ctx.parent.params.get("stack") if ctx.parent else None)
    if not chosen:
        raise UsageError("which stack?", field="-s/--stack", expected="gpufleet ops remediation -s STACK [run SLOT]")
    return chosen


@click.group("remediation", invoke_without_command=True)
@click.option("-s", "--stack", default=None, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON (the envelope; `rows`).")
@click.pass_context
def remediation(ctx: click.Context, stack: str | None, as_json: bool) -> None:
    """The remediation ladder: reason code or Xid -> the steps tried in order."""
    if ctx.invoked_subcommand is not None:
        return
    stack = _stack(ctx, stack)
    from gpufleet.daytwo.remediation import table
    from gpufleet.project import current_project
    from gpufleet.spec import load_stack_path

    spec = load_stack_path(current_project().stack_file(stack))
    rows = table(spec.ops.remediation)
    if as_json:
        from gpufleet.envelope import dumps, envelope  # the one JSON style (issue 23 item 8)

        click.echo(dumps(envelope("remediation", stack, {
            "rows": [{"code": c, "steps": list(s), "source": src} for c, s, src in rows]}, schema_version=1)))
        return
    click.echo(f"remediation ladder of {stack} (each step but quarantine ends with the re-admission gate):")
    for code, steps, src in rows:
        click.echo(f"  {code:<28} {' -> '.join(steps):<48} {src}")


@remediation.command("run")
@click.option("-s", "--stack", default=None, help="Stack name (here or on `remediation`).")
@click.argument("slot")
@click.option("--reason", default="", help="Why (required; journaled).")
@click.option("--force-unlock", is_flag=True, help="Take the stack's lock from a run on another host that is gone.")
@click.option("--dry-run", is_flag=True, help="Print the change set (the ladder's steps for SLOT); change nothing.")
@yes_option
@click.pass_context
def run(ctx: click.Context, stack: str | None, slot: str, reason: str, force_unlock: bool, dry_run: bool = False,
        yes: bool = False) -> None:
    """Climb the ladder for a quarantined SLOT until a step's gate admits it, or it is out for service."""
    from gpufleet.changeset_command import confirm_changes
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.daytwo.remediation_run import run_ladder
    from gpufleet.ops import audit

    stack = _stack(ctx, stack)
    with open_day_two(stack, "ops remediation run", force_unlock=force_unlock) as d:
        changes = ladder_changes(d, slot, reason)
        if changes is not None and not confirm_changes(changes, yes=yes, dry_run=dry_run):
            return
        out = run_ladder(d, slot, reason)
        audit.day_two(d, "remediation", reason, target=slot, code=out.code, cured_by=out.cured_by,
                      steps=[s["step"] + ":" + s["result"] for s in out.steps])
    for s in out.steps:
        click.echo(f"  {s['step']:<11} {s['result']:<12} {s['detail']}")
    if out.stopped:
        raise GateFailed(f"{slot}: {out.stopped}")
    if out.cured_by is None:
        raise GateFailed(f"{slot}: the ladder for {out.code} ended in quarantine for service")
    click.echo(f"{slot}: cured by {out.cured_by}, {out.state}")


def ladder_changes(d: Any, slot: str, reason: str) -> "ChangeSet | None":
    """What the ladder may do to a quarantined SLOT (read from the pool, nothing changed): each step
    runs only when the ones before did not cure it, so a replace is the most it buys. None when the
    ladder would refuse anyway (no reason, not quarantined): run_ladder says why."""
    from gpufleet.changeset import ChangeSetBuilder
    from gpufleet.changeset_command import hourly_price
    from gpufleet.daytwo.remediation import QUARANTINE, REPLACE, ladder_for
    from gpufleet.pool.protocol import NodeState

    node = d.pool.state().get(slot)
    if not " ".join(reason.split()) or node is None or node.state is not NodeState.QUARANTINED:
        return None
    code = node.reason_code or "quarantined"
    steps = ladder_for(code, d.spec.ops.remediation)
    usd, note = hourly_price(d.spec)
    b = ChangeSetBuilder("ops remediation run", d.stack, simulated=d.spec.simulated, price_note=note)
    for step in steps:
        if step == REPLACE:
            action = d.spec.rollout.replace_action
            b.add("terminate" if action == "terminate" else "stop", "instance", slot,
                  f"replace: its current instance (rollout.replaceAction {action})", usd_per_hour=usd)
            b.add("launch", "instance", slot, "replace: a new instance, gated fully", usd_per_hour=usd)
        elif step == QUARANTINE:
            b.note(f"{slot} stays quarantined, out for service, when every step before fails")
        else:
            b.add("configure", "instance", slot, step)
    if any(step != QUARANTINE for step in steps):
        b.add("admit", "pool-node", slot, "when a step's re-admission gate passes")
    b.note(f"{code}: the ladder {' -> '.join(steps)} stops at the first step that cures the node")
    return b.build()
