"""The CLI's contract: exit codes of DESIGN.md section 8 and machine-readable output.

Every test runs in a throwaway project (the repository's Pulumi.yaml and stacks copied, its code,
images and playbooks linked) so that what a command writes (`.gpufleet/<stack>/`, reports) lands
in tmp_path, never in the checkout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.errors import DriftDetected, ExternalCommandFailed, GateFailed


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the repository's project, the current directory and $GPUFLEET_PROJECT for the test."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", root / "stacks")
    for name in ("infra", "policies", "images", "playbooks"):  # read only
        (root / name).symlink_to(REPO / name)
    monkeypatch.chdir(root)
    monkeypatch.setenv("GPUFLEET_PROJECT", str(root))
    return root


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_plan_json_has_schema_version_and_the_seed_numbers():
    result = run("plan", "-s", "local", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["schema_version"], doc["kind"], doc["stack"]) == (2, "plan", "local")  # the envelope (issue 23 item 8)
    assert (doc["topology"]["nodes"], doc["topology"]["blocks"], doc["topology"]["units"]) == (125, 25, 100)
    assert len(doc["nodes"]) == 125 and doc["batches"][0]["canary"]


def test_plan_summary_is_readable():
    result = run("plan", "-s", "local")
    assert result.exit_code == 0
    for text in ("125 x 8 GPUs", "25 blocks", "100 units", "canary", "compute", "FSx for Lustre", "Memory fit"):
        assert text in result.output


def test_validate_clean_stack_exits_0_and_json_lists_findings():
    result = run("validate", "-s", "dev", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.output)
    assert (doc["schema_version"], doc["kind"], doc["stack"], doc["errors"]) == (2, "validate", "dev", [])
    assert doc["findings"] and all({"level", "code", "field", "message"} <= set(f) for f in doc["findings"])


def test_validate_json_prints_schema_errors_as_a_json_document(tmp_path):
    (tmp_path / "Pulumi.bad.yaml").write_text(
        "config:\n  gpufleet:cluster:\n    name: bad\n    targetGpus: many\n    colour: blue\n")
    result = run("validate", "-s", "bad", "--stacks-dir", str(tmp_path), "--json")
    assert result.exit_code == 2, result.output
    doc = json.loads(result.output)
    assert doc["schema_version"] == 2 and doc["findings"] == []
    by_field = {e["field"]: e for e in doc["errors"]}
    assert {"gpufleet:cluster.targetGpus", "gpufleet:cluster.colour"} <= set(by_field)
    assert all(e["file"].endswith("Pulumi.bad.yaml") and e["message"] for e in doc["errors"])
    assert by_field["gpufleet:cluster.colour"]["expected"].startswith("no such key")


def test_validate_json_reports_an_unreadable_stack_file_as_json(tmp_path):
    (tmp_path / "Pulumi.latin1.yaml").write_bytes("config:\n  gpufleet:cluster:\n    name: caf\xe9\n".encode("latin-1"))
    result = run("validate", "-s", "latin1", "--stacks-dir", str(tmp_path), "--json")
    assert result.exit_code == 2
    [error] = json.loads(result.output)["errors"]
    assert error["file"].endswith("Pulumi.latin1.yaml") and "not UTF-8" in error["message"]


def test_plan_and_validate_json_spell_schema_version_in_snake_case():
    for args in (("plan", "-s", "dev", "--json"), ("validate", "-s", "dev", "--json")):
        doc = json.loads(run(*args).output)
        assert "schema_version" in doc and "schemaVersion" not in doc


def test_preview_json_spells_schema_version_like_every_other_output():
    result = run("preview", "-s", "dev", "--offline", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert "schema_version" in doc and "schemaVersion" not in doc


def test_usage_errors_exit_2():
    assert run("plan").exit_code == 2
    assert run("no-such-command").exit_code == 2


def test_missing_stack_exits_2_and_names_the_file():
    result = run("validate", "-s", "nope")
    assert result.exit_code == 2 and "Pulumi.nope.yaml" in result.output


def test_library_errors_map_to_their_exit_codes(monkeypatch):
    import gpufleet.plan as plan_module

    for exc, code in ((GateFailed("2 nodes quarantined"), 3), (DriftDetected("1 resource differs"), 4),
                      (ExternalCommandFailed("ec2:DescribeInstances", "Throttling"), 1), (RuntimeError("bug"), 1)):
        def boom(spec, exc=exc):
            raise exc
        monkeypatch.setattr(plan_module, "plan_stack", boom)
        result = run("plan", "-s", "local")
        assert result.exit_code == code, (exc, result.output)
        assert "gpufleet:" in result.output


def test_image_prints_the_packer_build_with_the_bom_digest(project):
    from gpufleet.bom import load_bom, resolve_bom_path
    from gpufleet.spec import load_stack

    result = run("image", "-s", "dev", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["schema_version"], doc["kind"], doc["stack"]) == (1, "image", "dev")  # the envelope (issue 23 item 8)
    argv = doc["argv"]
    assert argv[:2] == ["packer", "build"] and argv[-1].endswith("images/gpufleet.pkr.hcl")
    digest = load_bom(resolve_bom_path(load_stack("dev"))).digest()
    assert f"bom_digest={digest}" in argv and "os=ubuntu-22.04" in argv
    extravars = next(a.split("=", 1)[1] for a in argv if a.startswith("extravars_file="))
    assert extravars.endswith(".gpufleet/dev/image/ubuntu-22.04-extravars.json")  # state lives per stack
    assert Path(extravars).resolve().is_relative_to(project.resolve())  # in the project's copy, not the checkout
    assert json.loads(open(extravars).read())


def test_image_refuses_a_stack_with_errors():
    from pathlib import Path

    corpus = Path(__file__).resolve().parents[1] / "fixtures" / "bad_stacks"
    result = run("image", "-s", "bom-missing", "--stacks-dir", str(corpus))
    assert result.exit_code == 2 and "BOM_INVALID" in result.output
