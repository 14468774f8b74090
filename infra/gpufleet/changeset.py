"""What a command is about to buy, terminate, drain or delete, shown before it does any of it,
and the decision whether it may go ahead.

Why one model for every command: a platform engineer reads the same table before `rollout`,
`pool replace`, `upgrade` and `destroy` (pcluster's update-cluster change set is the model), and
CI reads the same JSON. Why the decision is pure: whether to ask, to refuse or to go ahead depends
only on the change set, the flags and whether a person is at a terminal, so it is tested without
one; the command passes in how to ask.

Rules (issue 23):
- `--dry-run` prints the change set and does nothing (the command exits 0).
- A simulated stack (`local`, `local-slurm`) buys nothing real and never asks.
- An empty change set never asks.
- `--yes` goes ahead without asking (CI).
- At a terminal, the person is asked; anything but yes changes nothing (exit 1).
- Off a terminal without `--yes`: refused (exit 2), because nobody can answer.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable, Sequence

from gpufleet.errors import GpufleetError, UsageError
from gpufleet.pool.slurm.hostlist import hostlist

# What a change does, in the order the table lists them (the most consequential last, where the eye lands).
ACTIONS = ("create", "launch", "configure", "admit", "drain", "release", "stop", "backup", "terminate", "delete")
# Actions that cost money per hour (positive) or stop costing it (negative) when they carry a price.
# A stopped instance no longer bills its instance-hours (its volumes do, which the table leaves out).
_COST_SIGN = {"launch": 1, "stop": -1, "terminate": -1}


class Decision(Enum):
    PROCEED = "proceed"  # do it (asked and said yes, --yes, simulated, or nothing to do)
    DRY_RUN = "dry-run"  # printed; do nothing, exit 0


@dataclass(frozen=True)
class Change:
    """One thing the command will do to one target (a slot, a file system, a stack resource)."""

    action: str  # one of ACTIONS
    kind: str  # "instance", "pool-node", "storage", "stack-resource", "journal", ...
    target: str  # slot name, resource name or URN
    detail: str = ""  # why, or what exactly (e.g. "replaces i-0abc", "block 3, partition train")
    usd_per_hour: float | None = None  # what one such target costs per hour, when a sourced price is known

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"change action {self.action!r} is not one of {', '.join(ACTIONS)}")


@dataclass(frozen=True)
class ChangeSet:
    command: str  # e.g. "rollout", "pool replace", "destroy"
    stack: str
    changes: tuple[Change, ...]
    simulated: bool = False  # a simulated stack: nothing real is bought, nothing is asked
    notes: tuple[str, ...] = ()  # what the reader should know (e.g. "jobs on 3 nodes are waited for")
    price_note: str = ""  # where the hourly price comes from, or why it is unknown

    @property
    def empty(self) -> bool:
        return not self.changes

    def count(self, action: str, kind: str | None = None) -> int:
        return sum(1 for c in self.changes if c.action == action and (kind is None or c.kind == kind))

    def targets(self, action: str, kind: str | None = None) -> list[str]:
        return [c.target for c in self.changes if c.action == action and (kind is None or c.kind == kind)]

    @property
    def usd_per_hour_delta(self) -> float | None:
        """Hourly cost added (launches) minus removed (terminations); None when any priced action
        has no price (a partial sum would understate the bill)."""
        total = 0.0
        for c in self.changes:
            sign = _COST_SIGN.get(c.action)
            if sign is None or c.kind != "instance":
                continue
            if c.usd_per_hour is None:
                return None
            total += sign * c.usd_per_hour
        return total

    def to_json(self) -> dict[str, Any]:
        """The body of the `changeset` document (snake_case; the caller wraps it in the envelope)."""
        groups = _groups(self.changes)
        return {
            "command": self.command,
            "simulated": self.simulated,
            "empty": self.empty,
            "summary": [{"action": a, "kind": k, "count": len(cs), "targets": compress([c.target for c in cs])}
                        for (a, k), cs in groups],
            "changes": [{"action": c.action, "kind": c.kind, "target": c.target, "detail": c.detail,
                         "usd_per_hour": c.usd_per_hour} for c in self.changes],
            "usd_per_hour_delta": self.usd_per_hour_delta,
            "price_note": self.price_note,
            "notes": list(self.notes),
        }

    def render(self) -> str:
        """The table a person reads before answering: one line per action and kind, targets
        compressed (`local-b0003-n[00015-00019]`), the details when few, the hourly cost."""
        head = f"change set: gpufleet {self.command} -s {self.stack}"
        if self.simulated:
            head += " (simulated stack: nothing real is bought or removed)"
        if self.empty:
            return f"{head}\n  nothing to change"
        lines = [head]
        for (action, kind), cs in _groups(self.changes):
            lines.append(f"  {action:<9} {len(cs):>5} {kind}: {compress([c.target for c in cs])}")
            details = [c for c in cs if c.detail]
            for c in details[:8]:
                lines.append(f"  {'':<9} {'':>5}   {c.target}: {c.detail}")
            if len(details) > 8:
                lines.append(f"  {'':<9} {'':>5}   ... and {len(details) - 8} more")
        delta = self.usd_per_hour_delta
        priced = any(c.action in _COST_SIGN and c.kind == "instance" for c in self.changes)
        if priced:
            if delta is None:
                lines.append(f"  cost per hour: unknown ({self.price_note or 'no sourced price for this instance type'})")
            else:
                sign = "+" if delta >= 0 else "-"
                lines.append(f"  cost per hour: {sign}${abs(delta):,.2f}" + (f" ({self.price_note})" if self.price_note else ""))
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def decide(changes: ChangeSet, *, yes: bool, dry_run: bool, interactive: bool,
           ask: Callable[[str], bool]) -> Decision:
    """Whether the command may act. `ask(question)` is only called at a terminal; it returns the
    person's answer. Raises UsageError (exit 2) off a terminal without --yes, GpufleetError (exit
    1) when the person declines: in both cases nothing has been changed."""
    if dry_run:
        return Decision.DRY_RUN
    if changes.empty or changes.simulated or yes:
        return Decision.PROCEED
    if not interactive:
        raise UsageError(f"gpufleet {changes.command} -s {changes.stack} would change real resources "
                         f"({_short(changes)}) and no one is at a terminal to confirm: nothing was changed",
                         expected="--yes to go ahead without asking (CI), or --dry-run to only print the change set")
    if ask(f"Apply these changes to stack {changes.stack} ({_short(changes)})?"):
        return Decision.PROCEED
    raise GpufleetError(f"not confirmed: gpufleet {changes.command} -s {changes.stack} changed nothing")


def compress(names: Sequence[str]) -> str:
    """Slurm's hostlist form (`n[00001-00003],fsx`, order kept), cut at 400 characters for the table."""
    text = hostlist(names)
    return text if len(text) <= 400 else text[:397] + "..."


def _groups(changes: Iterable[Change]) -> list[tuple[tuple[str, str], list[Change]]]:
    by: dict[tuple[str, str], list[Change]] = defaultdict(list)
    for c in changes:
        by[(c.action, c.kind)].append(c)
    order = {a: i for i, a in enumerate(ACTIONS)}
    return sorted(by.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))


def _short(changes: ChangeSet) -> str:
    parts = [f"{len(cs)} {kind} to {action}" for (action, kind), cs in _groups(changes.changes)]
    return ", ".join(parts[:4]) + (", ..." if len(parts) > 4 else "")


@dataclass
class ChangeSetBuilder:
    """Collects changes in the order a command discovers them."""

    command: str
    stack: str
    simulated: bool = False
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    price_note: str = ""

    def add(self, action: str, kind: str, target: str, detail: str = "", usd_per_hour: float | None = None) -> None:
        self.changes.append(Change(action, kind, target, detail, usd_per_hour))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def build(self) -> ChangeSet:
        return ChangeSet(self.command, self.stack, tuple(self.changes), self.simulated, tuple(self.notes),
                         self.price_note)
