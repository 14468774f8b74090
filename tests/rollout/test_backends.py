"""The CI backend against a real moto server: the journal in S3 (one object per event, created
with If-None-Match) and the lock as a DynamoDB conditional write."""

from __future__ import annotations

import socket

import pytest

from gpufleet.errors import LockHeld
from gpufleet.rollout.backends import DynamoLock, S3JournalStore, open_backend
from gpufleet.rollout.journal import Journal
from gpufleet.rollout.lock import LockInfo
from gpufleet.spec import S3Backend

from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator
from tests.unit.moto_server import moto_client, moto_endpoint  # noqa: F401  (fixtures)

REGION = "us-east-1"
START = {"type": "rollout", "to": "started", "batches": [1]}
RUN = {"type": "batch", "batch": 1, "to": "running"}


@pytest.fixture()
def s3(moto_client):  # noqa: F811
    client = moto_client("s3", REGION)
    client.create_bucket(Bucket="gpufleet-state")
    return client


@pytest.fixture()
def dynamodb(moto_client):  # noqa: F811
    client = moto_client("dynamodb", REGION)
    client.create_table(TableName="gpufleet-locks", BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "LockID", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "LockID", "KeyType": "HASH"}])
    yield client
    client.delete_table(TableName="gpufleet-locks")


def test_the_s3_journal_appends_reads_back_and_archives(s3):
    store = S3JournalStore(s3, "gpufleet-state", "ci", "prod")
    assert not store.exists()
    j = Journal(store, "prod")
    j.load()
    for e in (START, RUN, {"type": "batch", "batch": 1, "to": "passed"}):
        j.append(e)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="gpufleet-state")["Contents"]]
    assert keys == [f"ci/prod/journal/{n:012d}.json" for n in (1, 2, 3)]
    again = Journal(S3JournalStore(s3, "gpufleet-state", "ci", "prod"), "prod")
    state = again.load()
    assert state.last_seq == 3 and state.batches[1].stage.value == "passed"
    where = store.archive()
    assert where.startswith("s3://gpufleet-state/ci/prod/journal.archive-") and not store.exists()


def test_a_second_writer_of_the_same_event_number_fails_loudly(s3):
    a = Journal(S3JournalStore(s3, "gpufleet-state", "ci", "race"), "race")
    b = Journal(S3JournalStore(s3, "gpufleet-state", "ci", "race"), "race")
    a.load(), b.load()
    a.append(START)
    with pytest.raises(LockHeld, match="already exists"):
        b.append(START)


def test_a_corrupt_s3_event_is_named(s3):
    s3.put_object(Bucket="gpufleet-state", Key="ci/bad/journal/000000000001.json", Body=b"{nope")
    with pytest.raises(Exception, match="000000000001.json is not a journal event"):
        Journal(S3JournalStore(s3, "gpufleet-state", "ci", "bad"), "bad").load()


def test_the_dynamodb_lock_names_its_holder_and_never_loses_a_takeover(dynamodb):
    here = LockInfo.mine("prod")
    other = LockInfo(pid=4242, host="ci-runner-9", started="2026-07-14T08:00:00+00:00", stack="prod")
    first = DynamoLock(dynamodb, "gpufleet-locks", "ci/prod", other)
    first.acquire()
    with pytest.raises(LockHeld, match="pid 4242 on ci-runner-9.*--force-unlock"):
        DynamoLock(dynamodb, "gpufleet-locks", "ci/prod", here).acquire()
    warnings: list[str] = []
    forced = DynamoLock(dynamodb, "gpufleet-locks", "ci/prod", here, force=True, warn=warnings.append)
    forced.acquire()
    assert "force-unlock" in warnings[0]
    first.release()  # the old holder's release must not remove the new holder's lock
    item = dynamodb.get_item(TableName="gpufleet-locks", Key={"LockID": {"S": "ci/prod"}})["Item"]
    assert str(here.pid) in item["Info"]["S"]
    forced.release()
    assert "Item" not in dynamodb.get_item(TableName="gpufleet-locks", Key={"LockID": {"S": "ci/prod"}})


def test_a_dead_pid_on_this_host_is_taken_over(dynamodb):
    dead = LockInfo(pid=2**22 + 12345, host=socket.gethostname(), started="x", stack="s")
    DynamoLock(dynamodb, "gpufleet-locks", "ci/s", dead).acquire()
    warnings: list[str] = []
    with DynamoLock(dynamodb, "gpufleet-locks", "ci/s", LockInfo.mine("s"), warn=warnings.append):
        assert "gone" in warnings[0]


def test_a_rollout_runs_on_the_s3_backend(tmp_path, s3, dynamodb, moto_client):  # noqa: F811
    backend = S3Backend(type="s3", bucket="gpufleet-state", prefix="ci", lock_table="gpufleet-locks",
                        region=REGION)
    store, lock = open_backend(backend, tmp_path, "tst", LockInfo.mine("tst"),
                               client_factory=lambda service, region: moto_client(service, region))
    assert isinstance(store, S3JournalStore) and isinstance(lock, DynamoLock)
    cloud = FakeCloud()
    with lock:
        journal = Journal(store, "tst", now=cloud.clock.now)
        journal.load()
        out = orchestrator(tmp_path, cloud, journal=journal).run()
    assert out.finished and out.short == []
    assert Journal(store, "tst").load().finished
    assert not (tmp_path / "state" / "journal.jsonl").exists()
