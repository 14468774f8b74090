"""Semantic-validation findings, in the style of AWS ParallelCluster's validators.

A validator never raises: it returns findings. Any ERROR stops commands that would
create something; WARNING and INFO are printed and recorded.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable

from pydantic import BaseModel, ConfigDict


class Level(str, Enum):
    ERROR = "ERROR"
    WARNING = "WARNING"
    INFO = "INFO"

    @property
    def rank(self) -> int:
        return {"ERROR": 0, "WARNING": 1, "INFO": 2}[self.value]


class Finding(BaseModel):
    """One validation result: `field` is the dotted path in the stack file it concerns."""

    model_config = ConfigDict(frozen=True)

    level: Level
    code: str
    field: str
    message: str

    def render(self) -> str:
        return f"{self.level.value:<7} {self.code:<28} {self.field}: {self.message}"


def error(code: str, field: str, message: str) -> Finding:
    return Finding(level=Level.ERROR, code=code, field=field, message=message)


def warning(code: str, field: str, message: str) -> Finding:
    return Finding(level=Level.WARNING, code=code, field=field, message=message)


def info(code: str, field: str, message: str) -> Finding:
    return Finding(level=Level.INFO, code=code, field=field, message=message)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.level is Level.ERROR for f in findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.level.rank, f.field, f.code))
