"""Run every rule over captured registrations (the offline stand-in for `--policy-pack`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from gpufleet.policies.rules import MANDATORY, RULES, StackResource


@dataclass(frozen=True)
class Violation:
    policy: str
    level: str
    resource: str | None
    message: str

    @property
    def mandatory(self) -> bool:
        return self.level == MANDATORY


def evaluate(resources: Iterable[tuple[str, str, Mapping[str, Any], Mapping[str, Any]]]) -> list[Violation]:
    """`resources`: (type, name, inputs, outputs). Resource rules see inputs, stack rules outputs + id."""
    items = list(resources)
    out: list[Violation] = []
    for rule in RULES:
        if rule.resource:
            for typ, name, inputs, _ in items:
                out += [Violation(rule.name, rule.level, name, m) for m in rule.resource(typ, inputs)]
        else:
            stack = [StackResource(typ, name, {**inputs, **outputs}) for typ, name, inputs, outputs in items]
            out += [Violation(rule.name, rule.level, None, m) for m in rule.stack(stack)]  # type: ignore[misc]
    return out
