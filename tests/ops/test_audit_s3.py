"""The audit log's copy in an S3 state bucket, against a moto server: one object per record, written
with the bucket's Object Lock mode and a retain-until date from its default retention rule where
the bucket has Object Lock (a locked record cannot be deleted), an ordinary object where it has
not; the copy verifies as a chain when the local file was edited; a stack whose backend is S3
gets the copy from `audit.record` itself."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest
from botocore.exceptions import ClientError

from gpufleet.ops import audit
from tests.unit.moto_server import moto_client, moto_endpoint  # noqa: F401  (fixtures)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def _bucket(s3: Any, name: str, lock_days: int | None) -> None:
    if lock_days is None:
        s3.create_bucket(Bucket=name)
        return
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": lock_days}}})


def _write(tmp_path: Path, log: audit.S3AuditLog, n: int = 3) -> list[str]:
    for i in range(n):
        rec = audit.entry(stack="s", who="operator", what="pool blacklist", why=f"reason {i}", env={})
        audit.append(tmp_path, rec, on_sealed=log.put)
    return (tmp_path / audit.FILE).read_text().splitlines()


def test_records_in_a_bucket_with_object_lock_are_locked_by_its_rule_and_cannot_be_deleted(
        moto_client: Callable[..., Any], tmp_path: Path) -> None:
    s3 = moto_client("s3", "us-east-1")
    _bucket(s3, "locked-state", lock_days=400)
    log = audit.S3AuditLog(s3, "locked-state", "gpufleet", "s", clock=lambda: NOW)
    lines = _write(tmp_path, log)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="locked-state")["Contents"])
    assert keys == sorted(f"gpufleet/s/audit/{json.loads(line)['hash']}.json" for line in lines)
    for key in keys:
        head = s3.head_object(Bucket="locked-state", Key=key)
        assert head["ObjectLockMode"] == "COMPLIANCE"
        assert head["ObjectLockRetainUntilDate"] == NOW + timedelta(days=400)
        with pytest.raises(ClientError) as refused:
            s3.delete_object(Bucket="locked-state", Key=key, VersionId=head["VersionId"])
        assert refused.value.response["Error"]["Code"] == "AccessDenied"
    assert [line.encode() for line in lines] == log.lines()  # the chain's order from the objects
    with pytest.raises(ClientError):  # a record is never replaced
        s3.put_object(Bucket="locked-state", Key=keys[0], Body=b"{}", IfNoneMatch="*")


def test_a_bucket_without_object_lock_gets_plain_objects_and_the_copy_outlives_a_local_edit(
        moto_client: Callable[..., Any], tmp_path: Path) -> None:
    s3 = moto_client("s3", "us-east-1")
    _bucket(s3, "plain-state", lock_days=None)
    log = audit.S3AuditLog(s3, "plain-state", "p", "s")
    lines = _write(tmp_path, log, 4)
    head = s3.head_object(Bucket="plain-state", Key=f"p/s/audit/{json.loads(lines[0])['hash']}.json")
    assert "ObjectLockMode" not in head and log.retention() == {}
    lines[1] = lines[1].replace('"who": "operator"', '"who": "someone-else"')
    (tmp_path / audit.FILE).write_text("\n".join(lines) + "\n")
    assert audit.verify(tmp_path).broken_at == 2
    copy = audit.verify_lines(log.lines(), None)
    assert copy.ok and copy.records == 4  # the bucket still holds what was written


def test_a_stack_with_an_s3_backend_copies_each_record_there(moto_client: Callable[..., Any], moto_endpoint: str,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.rollout.project import make_project

    s3 = moto_client("s3", "us-east-1")
    _bucket(s3, "fleet-state", lock_days=30)
    root = make_project(tmp_path / "p")
    stack = root / "stacks" / "Pulumi.local.yaml"
    stack.write_text(stack.read_text().replace("  gpufleet:rollout:\n", "  gpufleet:rollout:\n    stateBackend: "
                                               "{type: s3, bucket: fleet-state, prefix: gf, lockTable: gf-locks}\n", 1))
    for k, v in {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                 "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(k, v)
    state = root / ".gpufleet" / "local"
    audit.record(state, "local", "pool blacklist", "HBM errors", target="gpu-001", who="operator")
    audit.record(state, "local", "pool clear", "replaced", target="gpu-001", who="operator")
    objects = s3.list_objects_v2(Bucket="fleet-state", Prefix="gf/local/audit/")["Contents"]
    assert len(objects) == 2
    assert all(s3.head_object(Bucket="fleet-state", Key=o["Key"])["ObjectLockMode"] == "COMPLIANCE" for o in objects)
    local = (state / audit.FILE).read_text().splitlines()
    mirror = audit.s3_log_for(state, "local")
    assert mirror is not None and mirror.lines() == [line.encode() for line in local]


def test_history_verify_checks_the_buckets_copy_and_catches_the_last_records_removal(
        moto_client: Callable[..., Any], moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from gpufleet.cli import main
    from tests.rollout.project import make_project

    s3 = moto_client("s3", "us-east-1")
    _bucket(s3, "fleet-state2", lock_days=30)
    root = make_project(tmp_path / "p")
    stack = root / "stacks" / "Pulumi.local.yaml"
    stack.write_text(stack.read_text().replace("  gpufleet:rollout:\n", "  gpufleet:rollout:\n    stateBackend: "
                                               "{type: s3, bucket: fleet-state2, prefix: gf, lockTable: gf-locks}\n", 1))
    for k, v in {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                 "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(k, v)
    state = root / ".gpufleet" / "local"
    for i in range(3):
        audit.record(state, "local", "pool blacklist", f"reason {i}", target=f"gpu-00{i}", who="operator")
    verify = lambda: CliRunner().invoke(main, ["--project", str(root), "history", "-s", "local", "--verify"])  # noqa: E731
    ok = verify()
    assert ok.exit_code == 0 and "the copy verifies and agrees" in ok.output, ok.output
    lines = (state / audit.FILE).read_text().splitlines()
    (state / audit.FILE).write_text("\n".join(lines[:-1]) + "\n")  # the last record removed: the chain still holds
    assert audit.verify(state).ok
    removed = verify()
    assert removed.exit_code == 4 and "record 3 differs from the copy" in removed.output, removed.output
    lines[1] = lines[1].replace('"who": "operator"', '"who": "someone-else"')
    (state / audit.FILE).write_text("\n".join(lines) + "\n")
    edited = verify()
    assert edited.exit_code == 4 and "record 2 breaks the chain" in edited.output, edited.output
