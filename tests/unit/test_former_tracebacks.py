"""Each traceback issue 23 lists is a clear error with DESIGN.md section 8's exit code (item 5):
the S3 state backend without AWS_REGION (its region is the stack's), an unreachable S3 endpoint,
`ops serve` on a port past 65535, a folder where the lock file goes, and `--until-batch` past the
plan (refused, no longer clamped silently). The stack-file ones (deep nesting, a symlink loop)
are in test_spec_strict.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.errors import GpufleetError
from gpufleet.rollout.backends import open_backend
from gpufleet.rollout.lock import FileLock, LockInfo
from gpufleet.spec import load_stack_path


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("tb") / "p"
    assert run("init", str(target)).exit_code == 0
    assert run("init", str(target), "-s", "prod").exit_code == 0
    return target


@pytest.fixture
def no_aws_environment(monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _unreachable(monkeypatch) -> None:
    # port 9 (discard) on loopback: nothing listens, the connection is refused at once
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:9")


def test_the_s3_backend_takes_its_region_from_the_stack(project, no_aws_environment, tmp_path):
    spec = load_stack_path(project / "stacks" / "Pulumi.prod.yaml")
    assert spec.rollout.state_backend.type == "s3" and spec.rollout.state_backend.region is None
    store, lock = open_backend(spec.rollout.state_backend, tmp_path, "prod", LockInfo.mine("prod"),
                               region=spec.cluster.region)
    assert store.client.meta.region_name == spec.cluster.region == lock.client.meta.region_name


def test_rollout_dry_run_without_aws_region_against_an_unreachable_s3_exits_1(project, no_aws_environment,
                                                                               monkeypatch):
    _unreachable(monkeypatch)
    result = run("--project", str(project), "rollout", "-s", "prod", "--dry-run")
    assert result.exit_code == 1, result.output
    assert "s3" in result.output and "127.0.0.1:9" in result.output and "Could not connect" in result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output


def test_until_batch_past_the_plan_is_refused(project):
    result = run("--project", str(project), "rollout", "-s", "dev", "--until-batch", "99")
    assert result.exit_code == 2, result.output
    assert "--until-batch 99" in result.output and "from 1 to" in result.output


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "127.0.0.1:0"])
def test_ops_serve_on_a_port_out_of_range_is_a_usage_error(project, listen):
    result = run("--project", str(project), "ops", "serve", "-s", "dev", "--no-auth", "--listen", listen)
    assert result.exit_code == 2, result.output
    assert "1 to 65535" in result.output


def test_a_folder_where_the_lock_file_goes_is_an_error_naming_it(tmp_path):
    (tmp_path / "lock").mkdir()
    with pytest.raises(GpufleetError, match="lock: cannot open the stack's lock file: Is a directory") as caught:
        FileLock(tmp_path / "lock", LockInfo.mine("dev")).acquire()
    assert caught.value.exit_code == 1
