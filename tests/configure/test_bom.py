"""The BOM file: schema, the API other packages call, the digest, version order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.bom import COMPONENT_KEYS, bom_findings, load_bom, version_lt
from gpufleet.errors import ConfigError
from gpufleet.findings import Level
from gpufleet.project import find_project
from gpufleet.spec import ImageConfig, load_stack


def _write(tmp_path: Path, raw: dict, name: str = "bom.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load(find_project().default_bom.read_text())


@pytest.mark.parametrize("os_name", ["al2023", "ubuntu-22.04", "ubuntu-24.04"])
def test_component_versions_has_every_key_for_every_os(os_name):
    versions = load_bom().component_versions(os_name)
    assert tuple(versions) == COMPONENT_KEYS
    assert all(isinstance(v, str) and v for v in versions.values())


def test_digest_ignores_layout_but_not_content(tmp_path, raw):
    reordered = dict(reversed(list(raw.items())))
    a = load_bom(_write(tmp_path, raw, "a.yaml")).digest()
    b_path = tmp_path / "b.yaml"
    b_path.write_text("# a comment\n" + yaml.safe_dump(reordered, sort_keys=False))
    assert load_bom(b_path).digest() == a == load_bom().digest()
    raw["components"]["nccl"]["version"] = "2.27.3"
    assert load_bom(_write(tmp_path, raw, "c.yaml")).digest() != a


def test_an_optional_section_a_bom_does_not_set_is_not_part_of_its_digest(tmp_path, raw):
    raw.pop("monitoring", None)
    raw.pop("slurm_containers", None)
    bom = load_bom(_write(tmp_path, raw))
    assert bom.monitoring is None and bom.slurm_containers is None
    # a BOM written before those sections existed hashes the same as it did then
    assert '"monitoring"' not in bom.canonical() and '"slurm_containers"' not in bom.canonical()
    raw["slurm_containers"] = {"enroot": "3.5.0", "pyxis": "0.20.0"}
    assert load_bom(_write(tmp_path, raw, "with.yaml")).digest() != bom.digest()


def test_schema_error_names_file_and_dotted_field(tmp_path, raw):
    raw["components"]["nvidia_driver"]["kernel_modules"] = "closed"
    path = _write(tmp_path, raw)
    with pytest.raises(ConfigError) as exc:
        load_bom(path)
    assert exc.value.path == str(path)
    assert exc.value.field == "components.nvidia_driver.kernel_modules"
    assert "'closed'" in exc.value.render()


def test_unknown_key_and_missing_os_pin_are_schema_errors(tmp_path, raw):
    raw["os"]["al2023"]["kubelett"] = "1.33.4"
    with pytest.raises(ConfigError) as exc:
        load_bom(_write(tmp_path, raw))
    assert exc.value.field == "os.al2023.kubelett"
    with pytest.raises(ConfigError):
        load_bom().component_versions("rhel-9")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_bom(tmp_path / "nope.yaml")


def test_bom_findings_turn_an_unusable_file_into_an_error_finding(tmp_path, raw):
    spec = load_stack("dev")
    assert bom_findings(spec) == []
    missing = spec.model_copy(update={"image": ImageConfig(os=spec.image.os, bom=str(tmp_path / "nope.yaml"))})
    [finding] = bom_findings(missing)
    assert (finding.level, finding.field) == (Level.ERROR, "gpufleet:image.bom")
    raw["schema"] = 2
    broken = spec.model_copy(update={"image": ImageConfig(os=spec.image.os, bom=str(_write(tmp_path, raw)))})
    [finding] = bom_findings(broken)
    assert finding.code == "BOM_INVALID" and "schema" in finding.message


@pytest.mark.parametrize("older,newer", [
    ("1.22.0amzn4.0", "2.1.0amzn3.0"), ("1.22.0", "1.22.0amzn4.0"), ("570.26", "570.172.08"),
    ("2.9.9", "2.27.5"), ("2.1.0amzn3.0", "2.1.0amzn4.0"),
])
def test_version_order(older, newer):
    assert version_lt(older, newer) and not version_lt(newer, older)
