"""The final save of an FSx for Lustre file system before destroy deletes it (boto3).

- A persistent file system not linked to a data repository: `CreateBackup`, then wait until the
  backup is AVAILABLE. The backup is a user-initiated one, so it outlives the file system.
- A file system with S3 data repository associations: FSx takes no backups of it (CreateBackup's
  documented limits), so an `EXPORT_TO_REPOSITORY` data repository task, then wait until it
  SUCCEEDED: every file changed on Lustre is then in the bucket.

Why the client request token is derived from the file system: a destroy killed after asking and
run again asks again with the same token, and FSx answers with the same backup or task instead of
making a second one.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpufleet.errors import GpufleetError
from gpufleet.lifecycle.destroy_plan import FileSystem

BACKUP_DONE, BACKUP_FAILED = {"AVAILABLE"}, {"FAILED", "DELETED"}
TASK_DONE, TASK_FAILED = {"SUCCEEDED"}, {"FAILED", "CANCELED"}


def token(kind: str, fs_id: str) -> str:
    """At most 63 characters of [A-Za-z0-9_.:-] (FSx's ClientRequestToken pattern)."""
    return f"gpufleet-destroy-{kind}-{fs_id}"[:63]


class FsxSaver:
    def __init__(self, client: Any, stack: str, *, timeout_s: float = 6 * 3600.0, poll_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client  # boto3.client("fsx")
        self.stack = stack
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.sleep = sleep
        self.monotonic = monotonic

    def backup(self, fs: FileSystem) -> str:
        made = self._call("CreateBackup", fs, lambda: self.client.create_backup(
            FileSystemId=fs.fs_id, ClientRequestToken=token("backup", fs.fs_id),
            Tags=[{"Key": "gpufleet.io/stack", "Value": self.stack},
                  {"Key": "gpufleet.io/reason", "Value": "final backup before gpufleet destroy"}]))
        backup_id = made["Backup"]["BackupId"]
        self._wait(f"backup {backup_id} of {fs.fs_id}", BACKUP_DONE, BACKUP_FAILED,
                   lambda: self.client.describe_backups(BackupIds=[backup_id])["Backups"][0])
        return backup_id

    def export(self, fs: FileSystem) -> str:
        made = self._call("CreateDataRepositoryTask", fs, lambda: self.client.create_data_repository_task(
            Type="EXPORT_TO_REPOSITORY", FileSystemId=fs.fs_id, Report={"Enabled": False},
            ClientRequestToken=token("export", fs.fs_id),
            Tags=[{"Key": "gpufleet.io/stack", "Value": self.stack}]))
        task_id = made["DataRepositoryTask"]["TaskId"]
        self._wait(f"export task {task_id} of {fs.fs_id}", TASK_DONE, TASK_FAILED,
                   lambda: self.client.describe_data_repository_tasks(TaskIds=[task_id])["DataRepositoryTasks"][0])
        return task_id

    def _call(self, what: str, fs: FileSystem, call: Callable[[], Any]) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call()
        except ClientError as exc:
            err = exc.response.get("Error", {})
            raise GpufleetError(f"{what} of {fs.name} ({fs.fs_id}) refused: {err.get('Code')}: {err.get('Message')}; "
                                "the file system was not deleted") from None
        except BotoCoreError as exc:
            raise GpufleetError(f"{what} of {fs.name} ({fs.fs_id}) failed: {exc}; the file system was not deleted") from None

    def _wait(self, what: str, done: set[str], failed: set[str], read: Callable[[], dict[str, Any]]) -> None:
        start = self.monotonic()
        while True:
            item = read()
            life = item.get("Lifecycle", "")
            if life in done:
                return
            if life in failed:
                why = (item.get("FailureDetails") or {}).get("Message") or life
                raise GpufleetError(f"{what} ended {life}: {why}; the file system was not deleted")
            if self.monotonic() - start >= self.timeout_s:
                raise GpufleetError(f"{what} still {life or 'pending'} after {self.timeout_s:g} s; the file system "
                                    "was not deleted (rerun destroy to wait again)")
            self.sleep(self.poll_s)
