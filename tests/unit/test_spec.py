"""The stack spec: one model, two loaders that agree, and clear schema errors."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi.runtime.config as runtime_config
import pytest

from gpufleet.errors import ConfigError
from gpufleet.spec import (ClusterSpec, available_stacks, load_from_pulumi_config, load_stack, pulumi_config_from_raw,
                        raw_from_stack_yaml, stack_file)


@pytest.fixture
def engine_config():
    token = runtime_config.CONFIG.set({})
    yield pulumi.runtime.set_all_config
    runtime_config.CONFIG.reset(token)


@pytest.mark.parametrize("stack", available_stacks())
def test_cli_and_pulumi_loaders_agree(stack, engine_config):
    raw = raw_from_stack_yaml(stack_file(stack))
    engine_config(pulumi_config_from_raw(raw))
    from_engine = load_from_pulumi_config()
    assert from_engine == load_stack(stack)
    # and pulumi.Config's own structured read sees the same values
    assert pulumi.Config("gpufleet").require_object("cluster") == raw["cluster"]


def test_engine_long_key_form_is_accepted(engine_config):
    raw = raw_from_stack_yaml(stack_file("dev"))
    engine_config({k.replace("gpufleet:", "gpufleet:config:"): v
                                   for k, v in pulumi_config_from_raw(raw).items()})
    assert load_from_pulumi_config() == load_stack("dev")


def test_spec_is_frozen():
    spec = load_stack("local")
    with pytest.raises(Exception):
        spec.cluster.target_gpus = 8  # type: ignore[misc]


def test_unknown_keys_are_rejected_with_the_dotted_path():
    with pytest.raises(ConfigError) as exc:
        ClusterSpec.from_raw({"cluster": {"name": "abc", "region": "us-east-1", "availabilityZone": "us-east-1a",
                                          "instanceType": "p5.48xlarge", "targetGpus": 8, "typo": 1},
                              "pool": {"type": "sim"}}, source="x.yaml")
    assert "x.yaml: gpufleet:cluster.typo: Extra inputs are not permitted" in str(exc.value)


def test_every_error_of_a_file_is_reported_at_once():
    with pytest.raises(ConfigError) as exc:
        ClusterSpec.from_raw({"cluster": {"name": "abc", "region": "us-east-1", "availabilityZone": "us-east-1a",
                                          "instanceType": "p5.48xlarge", "targetGpus": -1, "unitGpus": 0},
                              "pool": {"type": "nope"}}, source="x.yaml")
    text = str(exc.value)
    for field in ("gpufleet:cluster.targetGpus", "gpufleet:cluster.unitGpus", "gpufleet:pool.type"):
        assert field in text


def test_missing_stack_file_lists_the_available_ones(tmp_path: Path):
    (tmp_path / "Pulumi.a.yaml").write_text("config: {}\n")
    with pytest.raises(ConfigError) as exc:
        load_stack("zzz", tmp_path)
    assert "Pulumi.zzz.yaml" in str(exc.value) and "stacks here: a" in str(exc.value)


def test_other_namespaces_are_left_to_pulumi(tmp_path: Path):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(stack_file("dev").read_text().replace("config:\n", "config:\n  kubernetes:context: foo\n", 1))
    assert load_stack("x", tmp_path) == load_stack("dev")
