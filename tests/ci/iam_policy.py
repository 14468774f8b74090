"""A small reader of IAM policy documents: which statements grant an action on a resource.

Enough IAM for the deployer policy's test: Action/Resource patterns with `*` and `?` (actions
case-insensitively, as IAM compares them), Allow and Deny. Conditions are not evaluated: a
statement with a Condition grants only under it, so `grants` reports it with its condition and
the test decides what that condition must be. An explicit Deny wins only when it has no condition.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READ_PREFIXES = ("Describe", "Get", "List")


@dataclass(frozen=True)
class Statement:
    sid: str
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    condition: dict[str, dict[str, Any]]

    def matches(self, action: str, resource: str | None = None) -> bool:
        if not any(_glob(p, action, ignore_case=True) for p in self.actions):
            return False
        return resource is None or any(_glob(p, resource, ignore_case=False) for p in self.resources)

    def condition_values(self, key: str) -> list[str]:
        """The values this statement's Condition gives `key` under any operator."""
        out: list[str] = []
        for block in self.condition.values():
            value = block.get(key)
            if value is not None:
                out.extend([value] if isinstance(value, str) else value)
        return out


def _glob(pattern: str, value: str, *, ignore_case: bool) -> bool:
    regex = fnmatch.translate(pattern)  # IAM's `*` and `?` are fnmatch's; IAM has no [...] sets
    return re.match(regex, value, re.IGNORECASE if ignore_case else 0) is not None


def _tuple(value: str | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class Policy:
    statements: tuple[Statement, ...]

    @classmethod
    def load(cls, path: Path, variables: dict[str, str] | None = None) -> "Policy":
        """The document; `variables` ({"aws:PrincipalTag/k": "v"}) stand for `${...}`, as IAM substitutes them."""
        text = path.read_text(encoding="utf-8")
        for name, value in (variables or {}).items():
            text = text.replace("${" + name + "}", value)
        doc = json.loads(text)
        if doc.get("Version") != "2012-10-17":
            raise ValueError(f"{path}: Version must be 2012-10-17 (policy variables need it)")
        statements = []
        for i, s in enumerate(doc["Statement"]):
            unsupported = {"NotAction", "NotResource", "NotPrincipal", "Principal"} & s.keys()
            if unsupported:
                raise ValueError(f"{path}: statement {i} uses {sorted(unsupported)}; the deployer policy does not")
            statements.append(Statement(s.get("Sid", f"#{i}"), s["Effect"], _tuple(s["Action"]),
                                        _tuple(s["Resource"]), s.get("Condition", {})))
        return cls(tuple(statements))

    def grants(self, action: str, resource: str | None = None) -> list[Statement]:
        """The Allow statements that grant `action` (on `resource`, when given), unless a plain Deny wins."""
        if any(s.effect == "Deny" and not s.condition and s.matches(action, resource) for s in self.statements):
            return []
        return [s for s in self.statements if s.effect == "Allow" and s.matches(action, resource)]

    def allows(self, action: str, resource: str | None = None) -> bool:
        return bool(self.grants(action, resource))

    def statement(self, sid: str) -> Statement:
        return next(s for s in self.statements if s.sid == sid)


def is_read(action: str) -> bool:
    return action.split(":", 1)[1].startswith(READ_PREFIXES)
