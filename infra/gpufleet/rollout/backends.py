"""Where a stack's journal and lock live: local files (default) or S3 + DynamoDB (CI runners).

S3 journal: one object per event, `<prefix>/<stack>/journal/<seq, 12 digits>.json`, written with
`If-None-Match: *`. Why not one object rewritten on every append (read-modify-write with an
`If-Match` ETag): that costs O(n) bytes per append (O(n^2) per rollout) and turns every append
into a race to retry; an object per event is one small PUT, atomic (S3 never shows half an
object, so there is no torn tail), and the conditional create makes two writers that both believe
they hold the lock fail loudly on the same sequence number instead of overwriting each other.
Listing is lexicographic, so zero-padded numbers read back in order.

DynamoDB lock (as Terraform's S3 backend): an item keyed `LockID = <prefix>/<stack>` put with
`attribute_not_exists(LockID)`; release and takeover are conditional on the holder's token, so a
slow process can never delete a lock someone else has taken since.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from gpufleet.errors import ExternalCommandFailed, LockHeld
from gpufleet.rollout.journal import JournalError, JournalStore, LocalJournalStore
from gpufleet.rollout.lock import FileLock, LockInfo, stale_or_raise

Warn = Callable[[str], None]


class S3JournalStore:
    def __init__(self, client: Any, bucket: str, prefix: str, stack: str) -> None:
        self.client, self.bucket = client, bucket
        self.base = f"{prefix.strip('/')}/{stack}/journal/".lstrip("/")
        self.location = f"s3://{bucket}/{self.base}"

    def _keys(self, base: str) -> list[str]:
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
            keys.extend(o["Key"] for o in page.get("Contents", ()))
        return sorted(keys)

    def exists(self) -> bool:
        resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.base, MaxKeys=1)
        return bool(resp.get("Contents"))

    def read(self, repair: bool) -> list[dict[str, Any]]:
        events = []
        for key in self._keys(self.base):
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            try:
                event = json.loads(body)
                if not isinstance(event, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                raise JournalError(f"s3://{self.bucket}/{key} is not a journal event ({exc})") from None
            events.append(event)
        return events

    def append(self, seq: int, line: str) -> None:
        from botocore.exceptions import ClientError

        key = f"{self.base}{seq:012d}.json"
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=line.encode(), IfNoneMatch="*",
                                   ContentType="application/json")
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise LockHeld(f"s3://{self.bucket}/{key} already exists: another process is writing this "
                               "journal (its lock was taken from it, or it runs without one)") from None
            raise ExternalCommandFailed("S3 PutObject", f"s3://{self.bucket}/{key}: {exc}") from None

    def archive(self) -> str:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        target = f"{self.base.rstrip('/')}.archive-{stamp}/"
        for key in self._keys(self.base):
            self.client.copy_object(Bucket=self.bucket, Key=target + key[len(self.base):],
                                    CopySource={"Bucket": self.bucket, "Key": key})
            self.client.delete_object(Bucket=self.bucket, Key=key)
        return f"s3://{self.bucket}/{target}"

    def close(self) -> None:
        pass


class S3BomStore:
    """The stack's kept BOMs in its S3 state (`gpufleet.bom_record.Remote`): one object per digest
    beside the journal, so a CI runner that never saw the rollout still finds what to roll back to."""

    def __init__(self, client: Any, bucket: str, prefix: str, stack: str) -> None:
        self.client, self.bucket = client, bucket
        self.base = f"{prefix.strip('/')}/{stack}/boms/".lstrip("/")

    def _key(self, digest: str) -> str:
        return f"{self.base}{digest.removeprefix('sha256:')}.yaml"

    def location(self, digest: str) -> str:
        return f"s3://{self.bucket}/{self._key(digest)}"

    def put(self, digest: str, text: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(digest), Body=text.encode("utf-8"),
                                   ContentType="application/yaml")
        except ClientError as exc:
            raise ExternalCommandFailed("S3 PutObject", f"{self.location(digest)}: {exc}") from None

    def get(self, digest: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(digest))["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") in ("NoSuchKey", "404"):
                return None
            raise ExternalCommandFailed("S3 GetObject", f"{self.location(digest)}: {exc}") from None
        return body.decode("utf-8", errors="replace")


def bom_store_for(backend: Any, stack: str, region: str | None = None,
                  client_factory: Callable[[str, str | None], Any] | None = None) -> S3BomStore | None:
    """Where the stack's kept BOMs also go: its S3 state backend's bucket, None for local state."""
    if backend.type == "local":
        return None
    make = client_factory or _boto_client
    return S3BomStore(make("s3", backend.region or region), backend.bucket, backend.prefix, stack)


class DynamoLock:
    def __init__(self, client: Any, table: str, key: str, info: LockInfo, force: bool = False,
                 warn: Warn = lambda _m: None) -> None:
        self.client, self.table, self.key, self.info, self.force, self.warn = client, table, key, info, force, warn
        self.token = uuid.uuid4().hex
        self.held = False
        self.where = f"dynamodb://{table}/{key}"

    def _item(self) -> dict[str, Any]:
        return {"LockID": {"S": self.key}, "Info": {"S": self.info.to_json()}, "Token": {"S": self.token}}

    def acquire(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.put_item(TableName=self.table, Item=self._item(),
                                 ConditionExpression="attribute_not_exists(LockID)")
            self.held = True
            return
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise ExternalCommandFailed("DynamoDB PutItem", f"{self.where}: {exc}") from None
        current = self.client.get_item(TableName=self.table, Key={"LockID": {"S": self.key}},
                                       ConsistentRead=True).get("Item")
        if current is None:  # released between our put and get: try once more
            return self.acquire()
        holder = LockInfo.parse(current.get("Info", {}).get("S", ""))
        if holder is not None:
            stale_or_raise(holder, self.info, self.force, self.where, self.warn)
        elif not self.force:
            raise LockHeld(f"{self.where}: locked by an unreadable holder record; rerun with --force-unlock "
                           "once you know no rollout runs")
        try:
            self.client.put_item(TableName=self.table, Item=self._item(), ConditionExpression="#t = :old",
                                 ExpressionAttributeNames={"#t": "Token"},
                                 ExpressionAttributeValues={":old": current.get("Token", {"S": ""})})
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise LockHeld(f"{self.where}: another process took the lock while this one was taking it over") \
                    from None
            raise ExternalCommandFailed("DynamoDB PutItem", f"{self.where}: {exc}") from None
        self.held = True

    def release(self) -> None:
        from botocore.exceptions import ClientError

        if not self.held:
            return
        try:
            self.client.delete_item(TableName=self.table, Key={"LockID": {"S": self.key}},
                                    ConditionExpression="#t = :mine", ExpressionAttributeNames={"#t": "Token"},
                                    ExpressionAttributeValues={":mine": {"S": self.token}})
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise ExternalCommandFailed("DynamoDB DeleteItem", f"{self.where}: {exc}") from None
            self.warn(f"{self.where}: the lock was taken over by another process before this one released it")
        self.held = False

    def __enter__(self) -> "DynamoLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def open_backend(backend: Any, state_dir: Path, stack: str, info: LockInfo, force: bool = False,
                 warn: Warn = lambda _m: None, client_factory: Callable[[str, str | None], Any] | None = None,
                 region: str | None = None) -> tuple[JournalStore, Any]:
    """(journal store, lock) for the stack's `rollout.stateBackend` (gpufleet.spec LocalBackend / S3Backend).

    The S3 backend's own `region`, else `region` (the stack's `cluster.region`): never the
    environment's alone, which a laptop or a runner may not set (botocore's NoRegionError)."""
    if backend.type == "local":
        return (LocalJournalStore(state_dir / "journal.jsonl", warn=warn),
                FileLock(state_dir / "lock", info, force=force, warn=warn))
    make = client_factory or _boto_client
    region = backend.region or region
    store = S3JournalStore(make("s3", region), backend.bucket, backend.prefix, stack)
    lock = DynamoLock(make("dynamodb", region), backend.lock_table,
                      f"{backend.prefix.strip('/')}/{stack}", info, force=force, warn=warn)
    return store, lock


def _boto_client(service: str, region: str | None) -> Any:
    import boto3
    from botocore.config import Config

    # an unreachable endpoint fails in about half a minute (three tries), not after minutes
    config = Config(connect_timeout=10, read_timeout=30, retries={"mode": "standard", "max_attempts": 3})
    return _Reported(boto3.client(service, region_name=region, config=config), service)


class _Reported:
    """A boto3 client whose transport failures (an unreachable endpoint, no credentials, no region)
    are ExternalCommandFailed naming the call and endpoint, not a botocore traceback. Service
    answers (ClientError) pass through: the store and the lock decide on their codes."""

    def __init__(self, client: Any, service: str) -> None:
        self._client, self._service = client, service

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name == "get_paginator":
            return lambda op: _ReportedPaginator(attr(op), self._failed)
        if not callable(attr) or name.startswith("_"):
            return attr
        return lambda *a, **kw: self._call(name, attr, *a, **kw)

    def _call(self, name: str, fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
        from botocore.exceptions import BotoCoreError

        try:
            return fn(*a, **kw)
        except BotoCoreError as exc:
            raise self._failed(name, exc) from None

    def _failed(self, name: str, exc: Exception) -> ExternalCommandFailed:
        return ExternalCommandFailed(f"{self._service} {name} ({self._client.meta.endpoint_url})", str(exc))


class _ReportedPaginator:
    def __init__(self, paginator: Any, failed: Callable[[str, Exception], ExternalCommandFailed]) -> None:
        self._paginator, self._failed = paginator, failed

    def paginate(self, **kw: Any) -> Any:
        from botocore.exceptions import BotoCoreError

        try:
            yield from self._paginator.paginate(**kw)
        except BotoCoreError as exc:
            raise self._failed("paginate", exc) from None
