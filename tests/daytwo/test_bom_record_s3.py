"""BOMs on record in the S3 state backend (CI), against a real moto server: a kept BOM goes to the
stack's state bucket beside its journal, a runner whose local state never saw it (every CI run)
finds the exact text there, and a copy changed in the bucket is refused naming the object."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet import bom_record
from gpufleet.errors import ConfigError
from gpufleet.rollout.backends import S3BomStore, bom_store_for
from gpufleet.spec import LocalBackend, S3Backend
from tests.daytwo.test_bom_record import TEMPLATE_BOM
from tests.unit.moto_server import moto_client, moto_endpoint  # noqa: F401  (fixtures)

REGION = "us-east-1"
BUCKET = "gpufleet-state-boms"  # its own: the moto server is shared by the session


@pytest.fixture()
def s3(moto_client):  # noqa: F811
    client = moto_client("s3", REGION)
    client.create_bucket(Bucket=BUCKET)
    return client


def test_a_kept_bom_is_in_the_bucket_and_a_fresh_runner_finds_its_exact_text(s3, tmp_path: Path) -> None:
    bom = tmp_path / "bom.yaml"
    text = "# as the rollout applied it\n" + TEMPLATE_BOM.read_text()
    bom.write_text(text)
    remote = S3BomStore(s3, BUCKET, "ci", "prod")
    kept_bom, _ = bom_record.keep(tmp_path / "runner-1", bom, applied_by="rollout prod", remote=remote)
    digest = kept_bom.digest()
    key = f"ci/prod/boms/{digest.removeprefix('sha256:')}.yaml"
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode() == text  # beside ci/prod/journal/

    fresh = tmp_path / "runner-2"  # the next CI job: no local state at all
    assert bom_record.find(fresh, digest) is None  # without the bucket it is not on record
    found = bom_record.find(fresh, digest, remote)
    assert found == bom_record.record_path(fresh, digest) and found.read_text() == text
    assert bom_record.find(fresh, "sha256:" + "0" * 64, remote) is None  # never kept anywhere: a miss


def test_a_copy_changed_in_the_bucket_is_refused_naming_the_object(s3, tmp_path: Path) -> None:
    bom = tmp_path / "bom.yaml"
    shutil.copy(TEMPLATE_BOM, bom)
    remote = S3BomStore(s3, BUCKET, "ci", "prod")
    kept_bom, _ = bom_record.keep(tmp_path / "runner-1", bom, applied_by="rollout prod", remote=remote)
    digest = kept_bom.digest()
    changed = TEMPLATE_BOM.read_text().replace('version: "2.27.5"', 'version: "2.27.6"')
    assert changed != TEMPLATE_BOM.read_text()
    s3.put_object(Bucket=BUCKET, Key=f"ci/prod/boms/{digest.removeprefix('sha256:')}.yaml", Body=changed.encode())
    fresh = tmp_path / "runner-2"
    with pytest.raises(ConfigError, match="does not match its digest") as err:
        bom_record.find(fresh, digest, remote)
    assert remote.location(digest) in str(err.value)
    assert not bom_record.record_path(fresh, digest).exists()  # nothing untrusted left behind


def test_only_the_s3_backend_keeps_boms_remotely(s3) -> None:
    assert bom_store_for(LocalBackend(), "prod") is None
    backend = S3Backend(type="s3", bucket=BUCKET, prefix="ci", lock_table="gpufleet-locks", region=REGION)
    store = bom_store_for(backend, "prod", client_factory=lambda _service, _region: s3)
    assert isinstance(store, S3BomStore) and store.location("sha256:" + "a" * 64).startswith(f"s3://{BUCKET}/ci/prod/boms/")
