"""`gpufleet upgrade -s STACK [--resume] [--dry-run] [--rollback] [--previous-bom PATH]`.

In place (site.yml with the new BOM), or by reimage for the nodes whose AMI is not the stack's
pinned `image.amiId` (`upgrade.method`, see `gpufleet.daytwo.reimage`).

Exit codes: 0 upgraded (or nothing to do, said so), 2 a BOM that breaks the compatibility rules,
a previous version not on record, or an unfinished upgrade without --resume (no node drained),
3 a group failed and was rolled back, or a drain did not finish (the upgrade halted), 1 errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import click

from gpufleet.changeset_command import yes_option
from gpufleet.errors import GateFailed, UsageError

if TYPE_CHECKING:
    from gpufleet.changeset import ChangeSet


@click.command("upgrade")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--resume", is_flag=True, help="Continue the stack's unfinished upgrade from the day-two journal.")
@click.option("--dry-run", is_flag=True, help="Print the groups and the change set the upgrade would take; change nothing.")
@click.option("--rollback", is_flag=True, help="Return every upgraded group to its recorded previous version.")
@click.option("--previous-bom", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="The BOM the pool runs now, when no earlier upgrade recorded it (needed to roll back).")
@click.option("--force-unlock", is_flag=True, help="Take the stack's lock from a run on another host that is gone.")
@click.option("--json", "as_json", is_flag=True, help="Print the upgrade report as JSON (the envelope every JSON has).")
@yes_option
def upgrade(stack: str, resume: bool, dry_run: bool, rollback: bool, previous_bom: Path | None,
            force_unlock: bool, as_json: bool = False, yes: bool = False) -> None:
    """Bring a live pool to the stack's current BOM and image in grey groups of whole blocks, canary first."""
    from gpufleet.changeset_command import confirm_changes
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.daytwo.upgrade_report import build, render_text, write
    from gpufleet.daytwo.upgrade_run import Upgrader
    from gpufleet.ops import audit

    def warn(message: str) -> None:
        click.echo(f"gpufleet: warning: {message}", err=True)

    with open_day_two(stack, "upgrade", force_unlock=force_unlock, warn=warn) as d:
        up = Upgrader(d)
        if dry_run:
            changes = _dry_run(d, err=as_json)
            if changes is not None:
                confirm_changes(changes, yes=yes, dry_run=True, as_json=as_json)
            click.echo("dry run: nothing was drained or changed", err=as_json)
            return
        current = up.state
        if rollback:
            confirm_changes(_rollback_changes(d, current), yes=yes, as_json=as_json)
            outcome = up.rollback()
        else:
            if current is not None and current.stage == "rolling-back":
                confirm_changes(_rollback_changes(d, current), yes=yes, as_json=as_json)
                outcome = up.rollback()
            elif current is not None and current.active:
                if not resume:
                    raise UsageError(f"{stack} has an unfinished upgrade to {current.target_digest[:19]}",
                                     field="--resume", expected="--resume to continue it (or --rollback)")
                todo = [g for _n, g in sorted(current.groups.items()) if g.stage != "admitted"]
                confirm_changes(upgrade_changes(d.stack, d.spec, [(g.number, g.blocks, g.slots) for g in todo],
                                                reimage=current.target_ami if current.method == "reimage" else None,
                                                digest=current.target_digest),
                                yes=yes, as_json=as_json)
                outcome = up.run()
            else:
                fresh = _fresh_changes(d)
                if fresh is not None:  # nothing to do: start() says so below
                    confirm_changes(fresh, yes=yes, as_json=as_json)
                nothing = up.start(previous_bom)
                if nothing is not None:  # the envelope with an empty body under --json, as every JSON has
                    click.echo(_nothing_json(d, stack, nothing) if as_json else nothing.message)
                    return
                outcome = up.run()
        paths = write(d, outcome, d.project.reports_dir(stack))
        audit.day_two(d, "upgrade", "rollback" if rollback else "to the stack's BOM", halted=outcome.halted,
                      groups_done=list(outcome.groups_done))
    if as_json:  # the report document alone on stdout (issue 23 item 8: upgrade had no --json)
        click.echo(build(stack, outcome).model_dump_json(indent=2))
    else:
        click.echo(render_text(outcome))
    click.echo("reports: " + ", ".join(str(p) for p in paths.values()), err=as_json)
    if outcome.halted:
        raise GateFailed(f"upgrade halted: {outcome.message}")


def _nothing_json(d, stack: str, nothing) -> str:
    """`upgrade --json` with nothing to do: the report with stage "none", no group, the target BOM."""
    from gpufleet.bom import load_bom
    from gpufleet.daytwo.upgrade_report import build

    report = build(stack, nothing)
    return report.model_copy(update={"target_digest": load_bom(d.project.path(d.spec.image.bom)).digest()}
                             ).model_dump_json(indent=2)


def _fresh_changes(d) -> "ChangeSet | None":
    """A new upgrade's change set, or None when no node would change."""
    from gpufleet.bom import load_bom
    from gpufleet.daytwo.upgrade_plan import plan_groups
    from gpufleet.daytwo.upgrade_run import Upgrader

    target = load_bom(d.project.path(d.spec.image.bom))
    c = Upgrader(d).changes(target)
    if not c.todo:
        return None
    groups = plan_groups(d.plan, c.todo, d.spec.upgrade)
    return upgrade_changes(d.stack, d.spec, [(g.number, g.blocks, g.slots) for g in groups],
                           reimage=c.ami if c.reimage else None, reimaged=set(c.reimage), digest=target.digest())


def _rollback_changes(d, current) -> "ChangeSet":
    if current is None:
        raise UsageError("this stack has no upgrade to roll back", field="--rollback",
                         expected="an upgrade in the day-two journal")
    done = [g for _n, g in sorted(current.groups.items(), reverse=True) if g.stage == "admitted"]
    return upgrade_changes(d.stack, d.spec, [(g.number, g.blocks, g.slots) for g in done], command="upgrade --rollback",
                           reimage=None, digest=None)


def upgrade_changes(stack: str, spec: Any, groups: Sequence[tuple[int, Iterable[int], Sequence[str]]], *,
                    reimage: str | None, digest: str | None, reimaged: set[str] | None = None,
                    command: str = "upgrade") -> "ChangeSet":
    """Per group (number, blocks, slots): each node drained, upgraded (in place, or its instance
    replaced from `reimage`), gated and admitted again. `reimaged`: the slots a reimage replaces
    (all of them when None and `reimage` is set)."""
    from gpufleet.changeset import ChangeSetBuilder
    from gpufleet.changeset_command import hourly_price

    usd, note = hourly_price(spec) if reimage else (None, "")
    b = ChangeSetBuilder(command, stack, simulated=spec.simulated, price_note=note)
    to = "its recorded previous version" if digest is None else digest[:19]
    for number, blocks, slots in groups:
        for slot in slots:
            b.add("drain", "pool-node", slot)
            if reimage and (reimaged is None or slot in reimaged):
                b.add("launch", "instance", slot, f"booted from {reimage}", usd_per_hour=usd)
                b.add("terminate", "instance", slot, "the instance it replaces", usd_per_hour=usd)
            else:
                b.add("configure", "instance", slot, f"site.yml to {to}")
            b.add("admit", "pool-node", slot)
        b.note(f"group {number}{' (canary)' if number == 1 else ''}: block(s) {list(blocks)}, {len(slots)} node(s): "
               "drained (running work waited for), upgraded, gated and admitted again before the next group")
    return b.build()


def _dry_run(d, err: bool = False) -> "ChangeSet | None":
    from gpufleet.bom import load_bom
    from gpufleet.daytwo.upgrade_plan import limits, plan_groups
    from gpufleet.daytwo.upgrade_run import Upgrader, nothing_message

    target = load_bom(d.project.path(d.spec.image.bom))
    c = Upgrader(d).changes(target)
    if not c.todo:
        click.echo(nothing_message(d.stack, len(c.current), target.digest(), c.ami), err=err)
        return None
    groups = plan_groups(d.plan, c.todo, d.spec.upgrade)
    how = f", {len(c.reimage)} of them by reimage from {c.ami}" if c.reimage else " in place"
    click.echo(f"upgrade {d.stack} to {target.digest()[:19]}: {len(c.todo)} node(s){how}, in {len(groups)} "
               f"group(s); at most {limits(d.plan, d.spec.upgrade)} unit(s) per partition out of service", err=err)
    for g in groups:
        click.echo(f"  group {g.number}{' (canary)' if g.canary else ''}: blocks {list(g.blocks)}, "
                   f"{len(g.slots)} node(s), units out {dict(g.units)}", err=err)
    return upgrade_changes(d.stack, d.spec, [(g.number, g.blocks, g.slots) for g in groups],
                           reimage=c.ami if c.reimage else None, reimaged=set(c.reimage), digest=target.digest())
