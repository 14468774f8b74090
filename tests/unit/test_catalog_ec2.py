"""The catalog against EC2 DescribeInstanceTypes as a real moto server serves it."""

from __future__ import annotations

import dataclasses

import pytest
from moto_server import moto_client, moto_endpoint  # noqa: F401  (fixtures)

from gpufleet import catalog
from gpufleet.findings import Level

REGION = "us-east-1"


@pytest.fixture()
def described(moto_client) -> dict[str, dict]:  # noqa: F811
    ec2 = moto_client("ec2", REGION)
    answer = ec2.describe_instance_types(InstanceTypes=sorted(catalog.CATALOG))
    return {item["InstanceType"]: item for item in answer["InstanceTypes"]}


def test_moto_describes_every_catalog_type(described):
    assert set(described) == set(catalog.CATALOG)


@pytest.mark.parametrize("name", sorted(catalog.CATALOG))
def test_catalog_entry_agrees_with_ec2(described, name):
    findings = catalog.cross_check(catalog.CATALOG[name], described[name])
    assert [f for f in findings if f.level is Level.ERROR] == []
    assert findings == [], [f.render() for f in findings]  # every compared field is reported


def test_cross_check_all_is_clean(described):
    assert catalog.cross_check_all(described.values()) == []


def test_wrong_entry_is_a_mismatch(described):
    wrong = dataclasses.replace(catalog.CATALOG["p5.48xlarge"], network_cards=16)
    findings = catalog.cross_check(wrong, described["p5.48xlarge"])
    assert [(f.level, f.code) for f in findings] == [(Level.ERROR, "CATALOG_MISMATCH")]
    assert "maximum network cards" in findings[0].message and "16" in findings[0].message


def test_wrong_gpu_memory_is_a_mismatch(described):
    wrong = dataclasses.replace(catalog.CATALOG["p5e.48xlarge"], hbm_gib_per_gpu=80)
    findings = catalog.cross_check(wrong, described["p5e.48xlarge"])
    assert [(f.level, f.code) for f in findings] == [(Level.ERROR, "CATALOG_MISMATCH")]
    assert "144384" in findings[0].message


def test_type_ec2_does_not_describe_is_unverified(moto_client):  # noqa: F811
    ec2 = moto_client("ec2", REGION)
    invented = dataclasses.replace(catalog.CATALOG["p5.48xlarge"], name="p9.96xlarge")
    answer = ec2.describe_instance_types(Filters=[{"Name": "instance-type", "Values": [invented.name]}])
    by_name = {d["InstanceType"]: d for d in answer["InstanceTypes"]}
    assert by_name == {}
    findings = catalog.cross_check(invented, by_name.get(invented.name))
    assert [(f.level, f.code) for f in findings] == [(Level.WARNING, "CATALOG_UNVERIFIED")]
    assert "p9.96xlarge" in findings[0].message and "unverified" in findings[0].message
