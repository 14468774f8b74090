"""The BOM record store: content-addressed copies of every BOM applied, checked on the way out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet import bom_record
from gpufleet.errors import ConfigError

TEMPLATE_BOM = Path(__file__).resolve().parents[2] / "infra" / "gpufleet" / "_template" / "images" / "bom.yaml"


@pytest.fixture
def bom(tmp_path: Path) -> Path:
    path = tmp_path / "bom.yaml"
    shutil.copy(TEMPLATE_BOM, path)
    return path


def test_a_kept_bom_is_found_by_its_digest_with_the_exact_text(bom: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    text = "# a comment the digest ignores\n" + bom.read_text()
    bom.write_text(text)
    kept_bom, kept = bom_record.keep(state, bom, applied_by="rollout s", image="ami-0123456789abcdef0")
    assert bom_record.find(state, kept_bom.digest()) == kept and kept.read_text() == text
    bom.write_text(text.replace("# a comment", "# another comment"))  # same digest: nothing rewritten
    assert bom_record.keep(state, bom, applied_by="upgrade")[1].read_text() == text
    assert [(h["digest"], h["image"]) for h in bom_record.history(state)] == [
        (kept_bom.digest(), "ami-0123456789abcdef0"), (kept_bom.digest(), None)]


def test_a_digest_never_kept_is_a_miss(tmp_path: Path) -> None:
    assert bom_record.find(tmp_path, "sha256:" + "0" * 64) is None


def test_a_kept_copy_changed_afterwards_is_refused_naming_the_file(bom: Path, tmp_path: Path) -> None:
    kept_bom, kept = bom_record.keep(tmp_path, bom, applied_by="rollout s")
    text = kept.read_text()
    versions = [line for line in text.splitlines() if "version:" in line]
    kept.write_text(text.replace(versions[0], versions[0].rstrip('"') + '1"', 1))
    with pytest.raises(ConfigError) as err:
        bom_record.find(tmp_path, kept_bom.digest())
    assert str(kept) in str(err.value) and "--previous-bom" in str(err.value)
    kept.write_text("not: [yaml")
    with pytest.raises(ConfigError, match="does not match its digest"):
        bom_record.find(tmp_path, kept_bom.digest())


def test_a_malformed_digest_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a BOM digest"):
        bom_record.record_path(Path("/nonexistent"), "sha256:../../etc")

