"""`gpufleet:acceptance` in a stack: camelCase keys, defaults, and a workload image that must be
pinned by digest (a clear error naming the field otherwise)."""

from __future__ import annotations

import pytest

from gpufleet.errors import ConfigError
from gpufleet.spec import ClusterSpec, load_stack

DIGEST = "sha256:" + "0f" * 32
SOURCE = "tests/acceptance/test_config.py"


def _spec(acceptance: dict) -> ClusterSpec:
    raw = load_stack("local").model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["acceptance"] = acceptance
    return ClusterSpec.from_raw(raw, source=SOURCE)


def test_defaults_and_camel_case_keys():
    spec = _spec({"storageMinShare": 0.7, "smokeNodes": 4, "workloadImage": f"public.ecr.aws/acme/train@{DIGEST}"})
    assert spec.acceptance.storage_min_share == 0.7 and spec.acceptance.smoke_nodes == 4
    assert load_stack("local").acceptance.workload_image is None


@pytest.mark.parametrize(("bad", "message"), [
    ({"workloadImage": "public.ecr.aws/acme/train:latest"},
     "String does not have the expected form (got 'public.ecr.aws/acme/train:latest')"),
    ({"workloadImage": f"train@{DIGEST}"},  # no repository path
     f"String does not have the expected form (got 'train@{DIGEST}')"),
    ({"smokeNodes": 5}, "Input should be less than or equal to 4 (got 5)"),
    ({"storageMinShare": 0}, "Input should be greater than 0 (got 0)"),
    ({"smokeLossFactor": 1.0}, "Input should be less than 1 (got 1.0)"),
])
def test_bad_values_are_refused_naming_the_field(bad, message):
    with pytest.raises(ConfigError) as err:
        _spec(bad)
    [finding] = err.value.errors  # exactly one finding: the bad field, nothing else of the stack
    assert (finding.path, finding.field, finding.message) == (SOURCE, f"gpufleet:acceptance.{next(iter(bad))}", message)
    assert str(err.value).startswith(f"{SOURCE}: gpufleet:acceptance.{next(iter(bad))}: {message}")
