"""The command-line side of a change set: the `--yes` flag, printing, asking at a terminal.

Every command that buys, terminates, drains or deletes calls `confirm_changes` once, after it has
worked out what it will do and before it does any of it (gpufleet.changeset has the rules).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

import click

from gpufleet.changeset import ChangeSet, Decision, decide

F = TypeVar("F", bound=Callable[..., Any])


def yes_option(f: F) -> F:
    """`--yes`: go ahead without asking (for CI). Off a terminal, a command that would change real
    resources refuses without it (exit 2)."""
    return click.option("--yes", "-y", "yes", is_flag=True,
                        help="Apply the change set without asking (CI). Off a terminal the command "
                             "refuses without it; simulated stacks never ask.")(f)


def confirm_changes(changes: ChangeSet, *, yes: bool, dry_run: bool = False, as_json: bool = False,
                    interactive: bool | None = None) -> bool:
    """Print the change set, then True to go ahead or False for a dry run (the caller then stops,
    exit 0). Declined or refused: raises (see gpufleet.changeset.decide); nothing was changed.

    The table goes to stderr when stdout carries JSON, so `--json` output stays one document; a dry
    run with `--json` prints the change set as that document."""
    if interactive is None:
        interactive = sys.stdin.isatty()
    if dry_run and as_json:
        from gpufleet.envelope import dumps, envelope

        click.echo(dumps(envelope("changeset", changes.stack, changes.to_json(), schema_version=1)))
    else:
        click.echo(changes.render(), err=as_json)
    decision = decide(changes, yes=yes, dry_run=dry_run, interactive=interactive,
                      ask=lambda question: click.confirm(question, default=False, err=True))
    return decision is Decision.PROCEED
