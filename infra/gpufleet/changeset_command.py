"""The command-line side of a change set: the `--yes` flag, printing, asking at a terminal.

Every command that buys, terminates, drains or deletes calls `confirm_changes` once, after it has
worked out what it will do and before it does any of it (gpufleet.changeset has the rules).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import click

from gpufleet.changeset import ChangeSet, Decision, decide

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from gpufleet.spec import ClusterSpec


def yes_option(f: F) -> F:
    """`--yes`: go ahead without asking (for CI). Off a terminal, a command that would change real
    resources refuses without it (exit 2)."""
    return click.option("--yes", "-y", "yes", is_flag=True,
                        help="Apply the change set without asking (CI). Off a terminal the command "
                             "refuses without it; simulated stacks never ask.")(f)


def at_a_terminal() -> bool:
    """Whether a person can answer: stdin is a terminal (a CI runner's, or click's test runner's, is not).
    A function of its own so a test can stand in for the person at one."""
    return sys.stdin.isatty()


def confirm_changes(changes: ChangeSet, *, yes: bool, dry_run: bool = False, as_json: bool = False,
                    interactive: bool | None = None) -> bool:
    """Print the change set, then True to go ahead or False for a dry run (the caller then stops,
    exit 0). Declined or refused: raises (see gpufleet.changeset.decide); nothing was changed.

    The table goes to stderr when stdout carries JSON, so `--json` output stays one document; a dry
    run with `--json` prints the change set as that document."""
    if interactive is None:
        interactive = at_a_terminal()
    if dry_run and as_json:
        from gpufleet.envelope import dumps, envelope

        click.echo(dumps(envelope("changeset", changes.stack, changes.to_json(), schema_version=1)))
    else:
        click.echo(changes.render(), err=as_json)
    decision = decide(changes, yes=yes, dry_run=dry_run, interactive=interactive,
                      ask=lambda question: click.confirm(question, default=False, err=True))
    return decision is Decision.PROCEED


def hourly_price(spec: "ClusterSpec") -> tuple[float | None, str]:
    """(USD per instance-hour or None, the ChangeSet.price_note): the stack's own rate, else the
    sourced price `gpufleet cost` uses (gpufleet.cost.pricing), else the sentence saying what to set.
    A simulated stack buys nothing: no price, and the note says so."""
    if spec.simulated:
        return None, "simulated stack: nothing is bought"
    from gpufleet.cost.pricing import resolve

    price, what_to_set = resolve(spec)
    if price is None:
        return None, what_to_set or "no sourced price"
    return price.usd_per_instance_hour, (f"{price.instance_type} {price.basis} in {price.region}: "
                                         f"${price.usd_per_instance_hour:,.2f}/instance-hour, {price.source}")
