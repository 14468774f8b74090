"""The audit log: one fsync'd JSON line per fleet-changing operation (who, what, when, why).

Why its own file beside the journals: the journals are the rollout's and day two's memory (folded
into state, repaired, maybe in S3); the audit log is for people asking "who changed the fleet and
why", across every command, in one place (`gpufleet history`). Appending never fails an operation
that already happened: an unwritable log is reported, the change stands.

No secret ever appears: values under secret-like keys are replaced, and the values of secret-like
environment variables (AWS keys, tokens, passwords) are masked wherever they would appear.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

FILE = "audit.jsonl"
_SECRET_KEY = re.compile(r"secret|token|passw|credential|private.?key|access.?key|session", re.I)
MASK = "[redacted]"


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of the environment's secret-like variables (8+ characters: shorter ones are not masked)."""
    return sorted({v for k, v in env.items() if _SECRET_KEY.search(k) and len(v) >= 8}, key=len, reverse=True)


def scrub(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, Mapping):
        return {str(k): MASK if _SECRET_KEY.search(str(k)) else scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, str):
        for s in secrets:
            value = value.replace(s, MASK)
        return value
    return value


def entry(*, stack: str, who: str, what: str, why: str, target: str | None = None,
          details: Mapping[str, Any] | None = None, at: datetime | None = None,
          env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One audit record, scrubbed (pure: the clock and the environment come in)."""
    raw = {"at": (at or datetime.now(timezone.utc)).isoformat(timespec="seconds"), "stack": stack, "who": who,
           "what": what, "target": target, "why": why, "details": dict(details or {})}
    return scrub(raw, secret_values(env if env is not None else os.environ))


def append(state_dir: Path, record: Mapping[str, Any]) -> Path:
    """Append one line and fsync it (a crash keeps every record written before it)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / FILE
    line = json.dumps(record, sort_keys=True, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def record(state_dir: Path, stack: str, what: str, why: str, *, target: str | None = None,
           details: Mapping[str, Any] | None = None, who: str | None = None, simulated: bool = False,
           warn: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The one call each fleet-changing command makes; `who` defaults to the day-two actor."""
    from gpufleet.daytwo.actor import who as actor

    rec = entry(stack=stack, who=who or actor(simulated, _sts_with_short_timeout), what=what, why=why, target=target, details=details)
    try:
        append(state_dir, rec)
    except OSError as exc:
        if warn is not None:
            warn(f"the audit log under {state_dir} could not be written ({exc}); the change itself stands")
        return None
    return rec


def _sts_with_short_timeout() -> Any:
    """STS with 2-second timeouts and no retries: an audit line must not wait on an unreachable endpoint."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    if session.get_credentials() is None:
        raise LookupError("no AWS credentials")
    return session.client("sts", config=Config(connect_timeout=2, read_timeout=2, retries={"max_attempts": 1}))


def read(state_dir: Path, since: datetime | None = None) -> Iterator[dict[str, Any]]:
    """Records in order; a torn last line (a crash mid-write) is skipped."""
    path = state_dir / FILE
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if since is not None and datetime.fromisoformat(rec["at"]) < since:
            continue
        yield rec


def day_two(d: Any, what: str, why: str, target: str | None = None, **details: Any) -> dict[str, Any] | None:
    """The audit line of a day-two command: stack, state dir and actor from its open stack (`DayTwo`)."""
    return record(d.state_dir, d.stack, what, why, target=target, who=d.who, details=details)
