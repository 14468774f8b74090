"""Strict, located stack-file errors (issue 23 item 5): what YAML or pydantic would silently
accept (a boolean as a number, a repeated key, 1e20 nodes a batch, two regions) is an error that
names the file, the line and the field, with exit code 2; a file that cannot be read (nested past
Python's stack, a symlink loop) is the same kind of error, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.errors import ConfigError
from gpufleet.spec import load_stack_path

REPO = Path(__file__).resolve().parents[2]
DEV = (REPO / "stacks" / "Pulumi.dev.yaml").read_text()


def _stack(tmp_path: Path, text: str, name: str = "s") -> Path:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(text)
    return path


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def _errors(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_path(path)
    return str(caught.value).splitlines()


def test_the_dev_stack_as_shipped_loads():
    load_stack_path(REPO / "stacks" / "Pulumi.dev.yaml")


@pytest.mark.parametrize("concern,key,written", [
    ("gates", "dcgmLevel", "yes"),
    ("rollout", "failuresBeforeBlacklist", "true"),
    ("rollout", "canaryMaxFailureRate", "on"),
])
def test_a_yaml_boolean_is_not_a_number(tmp_path, concern, key, written):
    text = DEV.replace(f"  gpufleet:{concern}:\n", f"  gpufleet:{concern}:\n    {key}: {written}\n", 1)
    text = text.replace("    dcgmLevel: 1\n", "") if key == "dcgmLevel" else text
    path = _stack(tmp_path, text)
    errors = _errors(path)
    line = _line(text, f"{key}: {written}")
    assert any(e.startswith(f"{path}:{line}: gpufleet:{concern}.{key}:") and "YAML boolean" in e
               for e in errors), errors


def test_a_boolean_in_a_mapping_of_numbers_is_refused(tmp_path):
    text = DEV.replace("  gpufleet:pool:\n    type: slurm\n",
                       "  gpufleet:pool:\n    type: slurm\n    slurmMaxMinutes:\n      debug: yes\n")
    errors = _errors(_stack(tmp_path, text))
    assert any("gpufleet:pool.slurmMaxMinutes.debug" in e and "YAML boolean" in e for e in errors), errors


def test_a_duplicate_key_names_both_lines(tmp_path):
    text = DEV.replace("    batchSize: 1\n", "    batchSize: 1\n    batchSize: 4\n")
    path = _stack(tmp_path, text)
    first = _line(text, "batchSize: 1")
    (error,) = _errors(path)
    assert error.startswith(f"{path}:{first + 1}: batchSize: key 'batchSize' appears twice (first on line {first})")


def test_a_duplicate_top_level_concern_is_refused(tmp_path):
    text = DEV + "  gpufleet:gates:\n    dcgmLevel: 3\n"
    (error,) = _errors(_stack(tmp_path, text))
    assert "'gpufleet:gates' appears twice" in error


@pytest.mark.parametrize("written", ["1.0e+20", "100000000000000000000", "100001"])
def test_a_batch_size_out_of_range_is_refused(tmp_path, written):
    text = DEV.replace("    batchSize: 1\n", f"    batchSize: {written}\n")
    path = _stack(tmp_path, text)
    line = _line(text, "batchSize:")
    errors = _errors(path)
    assert any(e.startswith(f"{path}:{line}: gpufleet:rollout.batchSize:") for e in errors), errors


def test_aws_region_and_cluster_region_must_agree(tmp_path):
    text = DEV.replace("  aws:region: us-east-1\n", "  aws:region: us-west-2\n")
    path = _stack(tmp_path, text)
    (error,) = _errors(path)
    line = _line(text, "    region: us-east-1")
    assert error.startswith(f"{path}:{line}: gpufleet:cluster.region: cluster.region 'us-east-1' is not aws:region 'us-west-2'")


def test_a_schema_error_carries_its_line(tmp_path):
    text = DEV.replace("    targetGpus: 16\n", "    targetGpus: -16\n")
    path = _stack(tmp_path, text)
    (error,) = _errors(path)
    assert error.startswith(f"{path}:{_line(text, 'targetGpus')}: gpufleet:cluster.targetGpus:")


def test_deep_nesting_is_a_config_error(tmp_path):
    path = _stack(tmp_path, "config:\n  gpufleet:cluster: " + "[" * 20000 + "]" * 20000 + "\n")
    (error,) = _errors(path)
    assert "nested too deeply" in error


def _validate(tmp_path: Path, stack: str):
    return CliRunner().invoke(main, ["validate", "-s", stack, "--stacks-dir", str(tmp_path)])


def test_cli_exit_codes_for_each_former_traceback_or_silent_acceptance(tmp_path):
    _stack(tmp_path, DEV.replace("    dcgmLevel: 1\n", "    dcgmLevel: yes\n"), "bool")
    _stack(tmp_path, "config:\n  gpufleet:cluster: " + "{a: " * 20000 + "1" + "}" * 20000 + "\n", "deep")
    (tmp_path / "Pulumi.loop-a.yaml").symlink_to("Pulumi.loop-b.yaml")
    (tmp_path / "Pulumi.loop-b.yaml").symlink_to("Pulumi.loop-a.yaml")
    for stack, text in [("bool", "YAML boolean"), ("deep", "nested too deeply"),
                        ("loop-a", "symbolic link that loops")]:
        result = _validate(tmp_path, stack)
        assert result.exit_code == 2, (stack, result.output, result.exception)
        assert f"Pulumi.{stack}.yaml" in result.output and text in result.output
        assert "Traceback" not in result.output



def _with_key(concern: str, key: str, written: str) -> str:
    """The dev stack with `key: written` first under `gpufleet:<concern>` (any other line of it gone)."""
    text = DEV.replace(f"  gpufleet:{concern}:\n", f"  gpufleet:{concern}:\n    {key}: {written}\n", 1)
    return "\n".join(ln for ln in text.splitlines()
                     if not (ln.startswith(f"    {key}: ") and ln != f"    {key}: {written}")) + "\n"


@pytest.mark.parametrize("concern,key,written", [
    ("storage", "datasetTib", ".inf"),
    ("cluster", "spareFraction", ".nan"),
    ("gates", "intraNodeBusbwFloorGbs", ".inf"),
])
def test_infinity_and_nan_are_not_numbers(tmp_path, concern, key, written):
    text = _with_key(concern, key, written)
    path = _stack(tmp_path, text)
    errors = _errors(path)
    assert any(e.startswith(f"{path}:{_line(text, f'{key}: {written}')}: gpufleet:{concern}.{key}:")
               and "finite" in e for e in errors), errors


@pytest.mark.parametrize("concern,key,written,says", [
    ("rollout", "failuresBeforeBlacklist", "1.0e+20", "maximum size"),
    ("rollout", "failuresBeforeBlacklist", "101", "less than or equal to 100"),
    ("rollout", "targetBatch", "100001", "less than or equal to 100000"),
    ("storage", "checkpointsRetained", "100000000", "less than or equal to 10000"),
])
def test_other_counts_out_of_range_are_refused(tmp_path, concern, key, written, says):
    text = _with_key(concern, key, written)
    path = _stack(tmp_path, text)
    line = _line(text, f"{key}: {written}")
    errors = _errors(path)
    assert any(e.startswith(f"{path}:{line}: gpufleet:{concern}.{key}:") and says in e for e in errors), errors


def test_a_duplicate_key_in_the_bom_names_both_lines_and_schema_errors_their_line(tmp_path):
    from gpufleet.bom import load_bom

    text = (REPO / "images" / "bom.yaml").read_text()
    first = _line(text, "components:")
    path = tmp_path / "bom.yaml"
    path.write_text(text.replace("components:\n", "components:\n", 1) + "components: {}\n")
    with pytest.raises(ConfigError) as caught:
        load_bom(path)
    assert str(caught.value).startswith(f"{path}:{len(text.splitlines()) + 1}: components: key 'components' "
                                        f"appears twice (first on line {first})")
    path.write_text(text.replace("schema: 1", "schema: 7", 1))
    with pytest.raises(ConfigError) as caught:
        load_bom(path)
    assert f"{path}:{_line(text, 'schema: 1')}: schema" in str(caught.value)
