"""Verdicts and check results, and the remediate-then-retest rule.

Why: every check speaks the same small language (DESIGN.md section 5), so a node's verdict is
simply the worst of its checks, and the one-retest rule lives in one pure function.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator

TAINT_VALUE_RE = re.compile(r"^[A-Za-z0-9._-]{1,63}$")


class Verdict(str, Enum):
    """Ordered from best to worst; `rank` gives the order."""

    PASS = "PASS"
    WARN = "WARN"
    REMEDIATE = "REMEDIATE"  # reset GPU / restart service / reboot, then rerun once
    QUARANTINE = "QUARANTINE"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def blocks_admission(self) -> bool:
        return self.rank >= _RANK[Verdict.REMEDIATE]


_RANK = {Verdict.PASS: 0, Verdict.WARN: 1, Verdict.REMEDIATE: 2, Verdict.QUARANTINE: 3}


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    result = Verdict.PASS
    for v in verdicts:
        if v.rank > result.rank:
            result = v
    return result


def is_taint_value(code: str) -> bool:
    """A Kubernetes taint value: at most 63 characters of [A-Za-z0-9._-] (DESIGN.md section 5)."""
    return bool(TAINT_VALUE_RE.match(code))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CheckResult(_Frozen):
    """One check on one node. `reason_code` is a short taint-safe code; `message` the free text."""

    check_id: str
    severity: str  # the research check list's severity column for this check: Q, R, W or a mix
    measured: str
    expected: str
    verdict: Verdict
    reason_code: str | None = None
    message: str = ""
    research_ref: str

    @field_validator("reason_code")
    @classmethod
    def _taint_safe(cls, v: str | None) -> str | None:
        if v is not None and not is_taint_value(v):
            raise ValueError(f"reason code {v!r} is not a valid taint value (<=63 of [A-Za-z0-9._-])")
        return v

    def model_post_init(self, __context: object) -> None:
        if self.verdict is not Verdict.PASS and not self.reason_code:
            raise ValueError(f"{self.check_id}: a {self.verdict.value} result needs a reason_code")


_interned: dict[tuple, CheckResult] = {}


def check_result(check_id: str, severity: str, measured: str, expected: str, verdict: Verdict,
                 reason_code: str | None = None, message: str = "", research_ref: str = None) -> CheckResult:  # type: ignore[assignment]
    """CheckResult(...) with these fields, sharing one instance per distinct set of values.

    Why: a cohort's healthy nodes produce the same results (the same PASS on every node), so
    building and validating a model per node per check (~40,000 for 1,250 nodes) mostly rebuilds
    equal objects. The results are frozen, so an equal instance is indistinguishable; each distinct
    set of values is still validated once (taint-safe code, reason code on non-PASS). Bounded:
    per-node values (busbw figures) would otherwise grow it without limit.
    """
    key = (check_id, severity, measured, expected, verdict, reason_code, message, research_ref)
    try:
        return _interned[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable value: let validation say what is wrong with it
        return CheckResult(check_id=check_id, severity=severity, measured=measured, expected=expected,
                           verdict=verdict, reason_code=reason_code, message=message, research_ref=research_ref)
    r = CheckResult(check_id=check_id, severity=severity, measured=measured, expected=expected, verdict=verdict,
                    reason_code=reason_code, message=message, research_ref=research_ref)
    if len(_interned) >= 8192:
        _interned.clear()
    _interned[key] = r
    return r


def not_collected(check_id: str, severity: str, expected: object, name: str, research_ref: str,
                  detail: str = "") -> CheckResult:
    """A file the check needs is absent: REMEDIATE `missing-<file stem>` (collect again; a second
    miss quarantines through the retest rule), never a pass."""
    stem = name.rsplit(".", 1)[0]
    return check_result(check_id, severity, "not collected", str(expected), Verdict.REMEDIATE, f"missing-{stem}"[:63],
                        f"{name} was not collected{': ' + detail if detail else ''}; collect again", research_ref)


class Action(str, Enum):
    ADMIT = "admit"
    RETEST = "retest"  # remediate (reset / restart / reboot) then gate again
    QUARANTINE = "quarantine"


class NodeOutcome(_Frozen):
    """A node's decision after one gating attempt, possibly informed by the previous attempt."""

    verdict: Verdict
    action: Action
    attempt: int = Field(ge=1)
    reason_codes: tuple[str, ...] = ()
    message: str = ""


def node_outcome(checks: Iterable[CheckResult], previous: NodeOutcome | None = None) -> NodeOutcome:
    """Worst-of the checks, then the retest rule: REMEDIATE once, a second REMEDIATE quarantines.

    Why a pure function of the previous outcome: the rollout journal stores outcomes, so a
    resumed rollout applies the same rule without re-running anything.
    """
    checks = list(checks)
    verdict = worst(c.verdict for c in checks)
    attempt = 1 if previous is None else previous.attempt + 1
    codes = tuple(dict.fromkeys(c.reason_code for c in checks if c.verdict is verdict and c.reason_code))
    if verdict is Verdict.QUARANTINE:
        return NodeOutcome(verdict=verdict, action=Action.QUARANTINE, attempt=attempt, reason_codes=codes,
                           message="; ".join(c.message for c in checks if c.verdict is verdict))
    if verdict is Verdict.REMEDIATE:
        if previous is not None and previous.verdict is Verdict.REMEDIATE:
            return NodeOutcome(verdict=Verdict.QUARANTINE, action=Action.QUARANTINE, attempt=attempt,
                               reason_codes=codes,
                               message="failed again after remediation: "
                               + "; ".join(c.message for c in checks if c.verdict is verdict))
        return NodeOutcome(verdict=verdict, action=Action.RETEST, attempt=attempt, reason_codes=codes,
                           message="; ".join(c.message for c in checks if c.verdict is verdict))
    warn_codes = tuple(dict.fromkeys(c.reason_code for c in checks if c.reason_code))
    return NodeOutcome(verdict=verdict, action=Action.ADMIT, attempt=attempt, reason_codes=warn_codes)


def primary_reason(outcome: NodeOutcome) -> str | None:
    """The one code for the quarantine taint value; the rest go to the annotation."""
    return outcome.reason_codes[0] if outcome.reason_codes else None
