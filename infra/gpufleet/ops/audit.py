"""The audit log: one fsync'd JSON line per fleet-changing operation (who, what, when, why).

Why its own file beside the journals: the journals are the rollout's and day two's memory (folded
into state, repaired, maybe in S3); the audit log is for people asking "who changed the fleet and
why", across every command, in one place (`gpufleet history`). Appending never fails an operation
that already happened: an unwritable log is reported, the change stands.

Tamper-evident: each record carries the hash of the one before (`prev`) and its own (`hash`,
an HMAC with the stack's audit key when it has one), so `gpufleet history --verify` names the
first record an edit, a deletion or an insertion broke. No secret ever appears: every record goes
through `gpufleet.masking.mask`, and the file is created 0600.

On a stack whose state backend is S3 (`gpufleet:rollout.stateBackend.type: s3`), every record is
also written to the state bucket, one object per record under `<prefix>/<stack>/audit/`, named
by its hash (the chain orders them), never overwritten (`If-None-Match`). Where the bucket has
S3 Object Lock with a default retention rule (the setting: create the bucket with Object Lock
enabled and give it a default retention, e.g. COMPLIANCE for 400 days), each record is written
with that mode and a retain-until date from the rule, so nobody, the account's root included
under COMPLIANCE, can delete or replace it before then. Without Object Lock the copy is an
ordinary object; `S3AuditLog.lines` reads it back for `verify_lines`.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from gpufleet import masking

FILE = "audit.jsonl"
MASK = masking.MASK
GENESIS = "0" * 64
KEY_ENV = "GPUFLEET_AUDIT_KEY"
KEY_FILE = "secrets/audit.key"  # under the stack's state dir, 0600; the env variable wins


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of the environment's secret-like variables (8+ characters: shorter ones are not masked)."""
    return masking.secret_values(env)


def scrub(value: Any, secrets: list[str]) -> Any:
    return masking.mask(value, secrets)


def entry(*, stack: str, who: str, what: str, why: str, target: str | None = None,
          details: Mapping[str, Any] | None = None, at: datetime | None = None,
          env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One audit record, scrubbed (pure: the clock and the environment come in)."""
    raw = {"at": (at or datetime.now(timezone.utc)).isoformat(timespec="seconds"), "stack": stack, "who": who,
           "what": what, "target": target, "why": why, "details": dict(details or {})}
    return scrub(raw, secret_values(env if env is not None else os.environ))


def canonical(record: Mapping[str, Any]) -> bytes:
    """The bytes a record's hash covers: every field but `hash`, keys sorted, no spaces."""
    return json.dumps({k: v for k, v in record.items() if k != "hash"}, sort_keys=True, separators=(",", ":"),
                      default=str).encode()


def seal(record: Mapping[str, Any], key: bytes | None) -> str:
    """SHA-256 of the record (HMAC-SHA256 with the stack's audit key: then only a holder of the
    key can rewrite the chain after an edit)."""
    data = canonical(record)
    return hmac.new(key, data, hashlib.sha256).hexdigest() if key else hashlib.sha256(data).hexdigest()


def audit_key(state_dir: Path, env: Mapping[str, str] | None = None) -> bytes | None:
    """The stack's audit key: $GPUFLEET_AUDIT_KEY, else `<state_dir>/secrets/audit.key`; none: hashed only."""
    env = os.environ if env is None else env
    if env.get(KEY_ENV):
        return env[KEY_ENV].encode()
    path = state_dir / KEY_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    masking.register(text)
    return text.encode() or None


def _last_line(fd: int) -> tuple[bytes, int]:
    """(the last complete line, where the bytes after it start): a torn tail lies beyond that offset."""
    tail, pos = b"", os.fstat(fd).st_size
    while pos > 0:
        start = max(0, pos - 65536)
        tail = os.pread(fd, pos - start, start) + tail
        pos = start
        last_nl = tail.rfind(b"\n")
        if last_nl < 0:
            continue
        prev_nl = tail.rfind(b"\n", 0, last_nl)
        if prev_nl >= 0 or pos == 0:
            return tail[prev_nl + 1:last_nl], pos + last_nl + 1
    return b"", 0


def append(state_dir: Path, record: Mapping[str, Any], key: bytes | None = None,
           on_sealed: Callable[[dict[str, Any], str], None] | None = None) -> Path:
    """Chain one record to the last (its `prev` is that record's `hash`), append it and fsync.

    Under an flock of the file, so concurrent writers (the webhook's threads, a CLI command) chain
    in one order. A torn last line (a crash mid-write) is cut and the cut is recorded in the next
    record; a crash keeps every record written before it. `on_sealed(record, line)` runs under the
    same lock once the line is on disk (the S3 copy, written in chain order)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / FILE
    key = key if key is not None else audit_key(state_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, masking.PRIVATE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        last, end = _last_line(fd)
        size = os.fstat(fd).st_size
        rec = dict(record)
        if end < size:
            os.ftruncate(fd, end)
            rec["repaired"] = f"cut a torn record of {size - end} bytes at offset {end}"
        try:
            prev = str(json.loads(last)["hash"]) if last else GENESIS
        except (ValueError, KeyError, TypeError):
            prev = hashlib.sha256(last).hexdigest()  # an unchained or damaged line: linked by its bytes
        rec["prev"] = prev
        rec["hash"] = seal(rec, key)
        line = json.dumps(rec, sort_keys=True, default=str)
        os.pwrite(fd, (line + "\n").encode(), end)
        os.fsync(fd)
        if on_sealed is not None:
            on_sealed(rec, line)
    finally:
        os.close(fd)
    return path


@dataclass(frozen=True)
class Verdict:
    records: int
    signed: bool  # checked with the stack's key
    broken_at: int | None = None  # 1-based line of the first record that does not verify
    why: str = ""
    legacy: int = 0  # records written before the chain (no hash), only ever at the start

    @property
    def ok(self) -> bool:
        return self.broken_at is None


def verify_lines(lines: list[bytes], key: bytes | None) -> Verdict:
    """Walk the chain: each record's hash must match its content and its `prev` the record before.

    An edit breaks the edited record's hash (or, rewritten without the key, the next one's link);
    a deletion or an insertion breaks the link of the record after it; a garbage line breaks at
    itself. The last record's removal is the one change a chain cannot see."""
    prev, legacy, chained = GENESIS, 0, False
    for n, raw in enumerate(lines, 1):
        try:
            rec = json.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError:
            return Verdict(n - 1, key is not None, n, "not a JSON record", legacy)
        if "hash" not in rec:
            if chained:
                return Verdict(n - 1, key is not None, n, "a record without a hash inside the chain", legacy)
            legacy += 1
            prev = hashlib.sha256(raw).hexdigest()
            continue
        chained = True
        if not hmac.compare_digest(str(rec["hash"]), seal(rec, key)):
            what = "its signature does not match its content" if key else "its hash does not match its content"
            return Verdict(n - 1, key is not None, n, f"{what} (an edited record)", legacy)
        if rec.get("prev") != prev:
            return Verdict(n - 1, key is not None, n, "it does not follow the record before it "
                                                      "(a record deleted or inserted before it)", legacy)
        prev = str(rec["hash"])
    return Verdict(len(lines), key is not None, legacy=legacy)


def local_lines(state_dir: Path) -> list[bytes]:
    """The audit file's complete lines (a torn last line is a crash, never acknowledged: left out)."""
    path = state_dir / FILE
    data = path.read_bytes() if path.exists() else b""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # torn: cut by the next append
    return lines


def verify(state_dir: Path, key: bytes | None = None) -> Verdict:
    """The stack's whole audit log (see `verify_lines`); a torn last line is a crash, not tampering."""
    return verify_lines(local_lines(state_dir), key if key is not None else audit_key(state_dir))


def first_difference(local: list[bytes], copy: list[bytes]) -> int | None:
    """The 1-based record where the local log and the bucket's copy part (a local record changed,
    or the copy holding one the file lost: the removal of the last record, which a chain alone
    cannot see); None when every record the copy has is the file's. A local record the copy lacks
    at the end is a copy that failed (warned when it did), not tampering."""
    for n, (a, b) in enumerate(zip(local, copy), 1):
        if a != b:
            return n
    return len(local) + 1 if len(copy) > len(local) else None


def record(state_dir: Path, stack: str, what: str, why: str, *, target: str | None = None,
           details: Mapping[str, Any] | None = None, who: str | None = None, simulated: bool = False,
           warn: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The one call each fleet-changing command makes; `who` defaults to the day-two actor."""
    from gpufleet.daytwo.actor import who as actor

    rec = entry(stack=stack, who=who or actor(simulated, _sts_with_short_timeout), what=what, why=why, target=target, details=details)
    mirror = s3_log_for(state_dir, stack)
    failed: list[str] = []

    def copy(sealed: dict[str, Any], line: str) -> None:
        try:
            mirror.put(sealed, line)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - botocore's errors; the local record stands
            failed.append(f"{type(exc).__name__}: {exc}")

    try:
        append(state_dir, rec, on_sealed=copy if mirror is not None else None)
    except OSError as exc:
        if warn is not None:
            warn(f"the audit log under {state_dir} could not be written ({exc}); the change itself stands")
        return None
    if failed and warn is not None:
        warn(f"the audit record could not be copied to {mirror.location} ({failed[0]}); it is in {state_dir / FILE}")  # type: ignore[union-attr]
    return rec


class S3AuditLog:
    """The audit log's copy in the stack's S3 state bucket (see the module's docstring)."""

    def __init__(self, client: Any, bucket: str, prefix: str, stack: str,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.client, self.bucket, self.clock = client, bucket, clock
        self.base = f"{prefix.strip('/')}/{stack}/audit/".lstrip("/")
        self.location = f"s3://{bucket}/{self.base}"
        self._rule: dict[str, Any] | None = None

    def retention(self) -> dict[str, Any]:
        """put_object's Object Lock arguments from the bucket's default retention rule; {} where the
        bucket has no Object Lock (or no default rule: then there is no period to lock for)."""
        if self._rule is None:
            from botocore.exceptions import ClientError

            try:
                conf = self.client.get_object_lock_configuration(Bucket=self.bucket)["ObjectLockConfiguration"]
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ObjectLockConfigurationNotFoundError":
                    raise
                conf = {}
            enabled = conf.get("ObjectLockEnabled") == "Enabled"
            self._rule = dict(conf.get("Rule", {}).get("DefaultRetention") or {}) if enabled else {}
        rule = self._rule
        if not rule:
            return {}
        days = int(rule.get("Days") or 0) or 365 * int(rule.get("Years") or 0)
        return {"ObjectLockMode": rule["Mode"], "ObjectLockRetainUntilDate": self.clock() + timedelta(days=days)}

    def put(self, record: Mapping[str, Any], line: str) -> str:
        key = f"{self.base}{record['hash']}.json"
        self.client.put_object(Bucket=self.bucket, Key=key, Body=(line + "\n").encode(), IfNoneMatch="*",
                               ContentType="application/json", **self.retention())
        return key

    def lines(self) -> list[bytes]:
        """The records in chain order (from the first, each the one whose `prev` is the last's
        hash); records the walk does not reach come after, where `verify_lines` names them."""
        bodies: list[bytes] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.base):
            for o in page.get("Contents", ()):
                bodies.append(self.client.get_object(Bucket=self.bucket, Key=o["Key"])["Body"].read().rstrip(b"\n"))
        by_prev: dict[str, list[bytes]] = {}
        for b in bodies:
            try:
                by_prev.setdefault(str(json.loads(b).get("prev")), []).append(b)
            except (ValueError, AttributeError):
                by_prev.setdefault("", []).append(b)
        out, prev = [], GENESIS
        while by_prev.get(prev):
            b = by_prev[prev].pop(0)
            out.append(b)
            prev = str(json.loads(b)["hash"])
        return out + [b for rest in by_prev.values() for b in rest]


_MIRRORS: dict[tuple[str, int], "S3AuditLog | None"] = {}


def s3_log_for(state_dir: Path, stack: str) -> S3AuditLog | None:
    """The S3 copy of a stack whose state backend is S3 (its stack file read from the project the
    state dir lies in, once per version of that file); None for a local backend."""
    from gpufleet.project import load_project
    from gpufleet.spec import load_stack_path

    try:
        project = load_project(state_dir.parent.parent)
        path = project.stack_file(stack)
        cache_key = (str(path), path.stat().st_mtime_ns)
        if cache_key in _MIRRORS:
            return _MIRRORS[cache_key]
        spec = load_stack_path(path)
    except Exception:  # noqa: BLE001 - no project around this state dir (a bare test dir): local only
        return None
    backend = spec.rollout.state_backend
    mirror = None
    if backend.type == "s3":
        from gpufleet.rollout.backends import _boto_client

        mirror = S3AuditLog(_boto_client("s3", backend.region or spec.cluster.region), backend.bucket,
                            backend.prefix, stack)
    _MIRRORS[cache_key] = mirror
    return mirror


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
