"""`gpufleet ops remediation -s STACK [--json]` shows the ladder in force (the table with the stack's
override); `gpufleet ops remediation run -s STACK SLOT --reason WHY` climbs it for a quarantined node.

Exit codes: 0 shown, or the node was cured and admitted again; 3 the ladder ended in quarantine
for service or the breaker stopped it; 2 bad input (not quarantined, no reason, a bad override).
"""

from __future__ import annotations

import click

from gpufleet.errors import GateFailed, UsageError


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
@click.pass_context
def run(ctx: click.Context, stack: str | None, slot: str, reason: str, force_unlock: bool) -> None:
    """Climb the ladder for a quarantined SLOT until a step's gate admits it, or it is out for service."""
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.daytwo.remediation_run import run_ladder
    from gpufleet.ops import audit

    stack = _stack(ctx, stack)
    with open_day_two(stack, "ops remediation run", force_unlock=force_unlock) as d:
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
