"""The destroy's storage step against botocore's Stubber: the exact FSx calls (CreateBackup with its
client request token, or an EXPORT_TO_REPOSITORY data repository task for an S3-linked file system),
waiting on DescribeBackups / DescribeDataRepositoryTasks, and FSx's refusals as clear errors. The
Stubber checks every request and response against botocore's own service model, so the shapes are
the real API's."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import Stubber

from gpufleet.errors import GpufleetError
from gpufleet.lifecycle.destroy_plan import FileSystem
from gpufleet.lifecycle.fsx import FsxSaver, token

WHEN = datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc)
FS = FileSystem("fs-0123456789abcdef0", "gpu-fsx", "PERSISTENT_2")
LINKED = FileSystem("fs-0fedcba9876543210", "gpu-data", "PERSISTENT_2", ("s3://gpu-data/datasets",))
BACKUP_ID = "backup-0a1b2c3d4e5f60718"
TASK_ID = "task-0a1b2c3d4e5f60718"


def client():
    return boto3.client("fsx", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


def _backup(life: str) -> dict:
    return {"BackupId": BACKUP_ID, "Lifecycle": life, "Type": "USER_INITIATED", "CreationTime": WHEN,
            "ResourceARN": f"arn:aws:fsx:us-east-1:123456789012:backup/{BACKUP_ID}",
            "FileSystem": {"FileSystemId": FS.fs_id, "FileSystemType": "LUSTRE", "StorageCapacity": 2400}}


def _task(life: str, failure: str | None = None) -> dict:
    task = {"TaskId": TASK_ID, "Lifecycle": life, "Type": "EXPORT_TO_REPOSITORY", "CreationTime": WHEN,
            "FileSystemId": LINKED.fs_id}
    if failure:
        task["FailureDetails"] = {"Message": failure}
    return task


def saver(c, sleeps: list[float], timeout_s: float = 3600):
    clock = [0.0]

    def sleep(s: float) -> None:
        sleeps.append(s)
        clock[0] += s

    return FsxSaver(c, "gpu", timeout_s=timeout_s, poll_s=30, sleep=sleep, monotonic=lambda: clock[0])


def test_a_final_backup_is_asked_with_a_stable_token_and_waited_for():
    c, sleeps = client(), []
    with Stubber(c) as stub:
        stub.add_response("create_backup", {"Backup": _backup("CREATING")}, {
            "FileSystemId": FS.fs_id, "ClientRequestToken": token("backup", FS.fs_id),
            "Tags": [{"Key": "gpufleet.io/stack", "Value": "gpu"},
                     {"Key": "gpufleet.io/reason", "Value": "final backup before gpufleet destroy"}]})
        stub.add_response("describe_backups", {"Backups": [_backup("CREATING")]}, {"BackupIds": [BACKUP_ID]})
        stub.add_response("describe_backups", {"Backups": [_backup("TRANSFERRING")]}, {"BackupIds": [BACKUP_ID]})
        stub.add_response("describe_backups", {"Backups": [_backup("AVAILABLE")]}, {"BackupIds": [BACKUP_ID]})
        assert saver(c, sleeps).backup(FS) == BACKUP_ID
        stub.assert_no_pending_responses()
    assert sleeps == [30, 30]
    assert len(token("backup", "fs-" + "0" * 60)) <= 63


def test_an_s3_linked_file_system_is_exported_to_its_repository():
    c, sleeps = client(), []
    with Stubber(c) as stub:
        stub.add_response("create_data_repository_task", {"DataRepositoryTask": _task("PENDING")}, {
            "Type": "EXPORT_TO_REPOSITORY", "FileSystemId": LINKED.fs_id, "Report": {"Enabled": False},
            "ClientRequestToken": token("export", LINKED.fs_id), "Tags": [{"Key": "gpufleet.io/stack", "Value": "gpu"}]})
        stub.add_response("describe_data_repository_tasks", {"DataRepositoryTasks": [_task("EXECUTING")]},
                          {"TaskIds": [TASK_ID]})
        stub.add_response("describe_data_repository_tasks", {"DataRepositoryTasks": [_task("SUCCEEDED")]},
                          {"TaskIds": [TASK_ID]})
        assert saver(c, sleeps).export(LINKED) == TASK_ID
        stub.assert_no_pending_responses()


def test_fsx_refusing_a_backup_is_a_clear_error_and_nothing_is_deleted():
    c = client()
    with Stubber(c) as stub:
        stub.add_client_error("create_backup", service_error_code="BadRequest", http_status_code=400,
                              service_message="Backups are not supported on file systems linked to a data repository")
        with pytest.raises(GpufleetError) as err:
            saver(c, []).backup(FS)
    assert "BadRequest" in str(err.value) and "not deleted" in str(err.value) and FS.fs_id in str(err.value)


def test_a_failed_export_task_says_why():
    c = client()
    with Stubber(c) as stub:
        stub.add_response("create_data_repository_task", {"DataRepositoryTask": _task("PENDING")})
        stub.add_response("describe_data_repository_tasks",
                          {"DataRepositoryTasks": [_task("FAILED", "S3 bucket access denied")]})
        with pytest.raises(GpufleetError) as err:
            saver(c, []).export(LINKED)
    assert "FAILED" in str(err.value) and "access denied" in str(err.value)


def test_a_backup_still_creating_at_the_timeout_stops_the_step_resumably():
    c, sleeps = client(), []
    with Stubber(c) as stub:
        stub.add_response("create_backup", {"Backup": _backup("CREATING")})
        for _ in range(3):
            stub.add_response("describe_backups", {"Backups": [_backup("CREATING")]})
        with pytest.raises(GpufleetError) as err:
            saver(c, sleeps, timeout_s=60).backup(FS)
    assert "still CREATING after 60 s" in str(err.value) and sleeps == [30, 30]
