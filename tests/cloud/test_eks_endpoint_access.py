"""AWS program review A2: the EKS endpoint is private unless the stack names public egress CIDRs
(`pool.endpointPublicAccessCidrs`), and `gpufleet validate` says where `pulumi up` must run when it
is private. The spec's refusals name the file and field; the program's vpcConfig is read under mocks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.errors import ConfigError
from gpufleet.findings import Level
from gpufleet.plan import build_plan
from gpufleet.program.capture import capture_program
from gpufleet.spec import ClusterSpec, load_stack_path, raw_from_stack_yaml, stack_file

EKS = "aws:eks/cluster:Cluster"
FIELD = "gpufleet:pool.endpointPublicAccessCidrs"
EGRESS = ["18.206.107.24/29", "3.5.140.2/32"]  # public ranges (an operator's NAT, a runner's address)


def _spec(stack: str, **pool) -> ClusterSpec:
    raw = raw_from_stack_yaml(stack_file(stack))
    return ClusterSpec.from_raw({**raw, "pool": {**raw["pool"], **pool}}, source=f"Pulumi.{stack}.yaml")


def _stack_file_with(tmp_path: Path, stack: str, cidrs) -> Path:
    doc = yaml.safe_load(stack_file(stack).read_text())
    doc["config"]["gpufleet:pool"]["endpointPublicAccessCidrs"] = cidrs
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(("cidr", "why"), [
    ("10.0.0.0/8", "not a public address range"),  # inside the VPC the private endpoint answers
    ("18.206.107.24/24", "host bits set"),
    ("18.206.107.24", None),  # a bare address is a /32: accepted
    ("eighteen", "not an IPv4 network"),
])
def test_a2_a_bad_cidr_is_refused_naming_the_file_and_the_entry(tmp_path, cidr, why):
    path = _stack_file_with(tmp_path, "prod", [EGRESS[0], cidr])
    if why is None:
        assert load_stack_path(path).pool.endpoint_public_access_cidrs == (EGRESS[0], cidr)
        return
    with pytest.raises(ConfigError) as err:
        load_stack_path(path)
    assert err.value.field == f"{FIELD}[1]" and str(path.name) in str(err.value.path) and why in str(err.value)
    assert err.value.line is not None


def test_a2_public_cidrs_belong_to_a_kubernetes_pool_only():
    with pytest.raises(ConfigError, match="endpointPublicAccessCidrs is for a kubernetes pool") as err:
        _spec("dev", endpointPublicAccessCidrs=EGRESS)
    assert err.value.field == "gpufleet:pool"
    with pytest.raises(ConfigError, match="names a CIDR twice"):
        _spec("prod", endpointPublicAccessCidrs=[EGRESS[0], EGRESS[0]])


def test_a2_by_default_the_endpoint_stays_private_and_sends_no_cidr_list(full_capture):
    eks, = full_capture("prod").of_type(EKS)
    vpc = eks.inputs["vpcConfig"]
    assert vpc["endpointPrivateAccess"] is True and vpc["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in vpc, "EKS would default the list to 0.0.0.0/0"


def test_a2_named_cidrs_open_the_public_endpoint_to_them_only():
    raw = raw_from_stack_yaml(stack_file("prod"))
    cap = capture_program("prod", target_batch=0,
                          overrides={"pool": {**raw["pool"], "endpointPublicAccessCidrs": EGRESS}})
    eks, = cap.of_type(EKS)
    vpc = eks.inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True and vpc["publicAccessCidrs"] == EGRESS
    assert vpc["endpointPrivateAccess"] is True, "the nodes keep the private endpoint"


def _codes(spec: ClusterSpec) -> dict[str, tuple[Level, str, str]]:
    return {f.code: (f.level, f.field, f.message) for f in build_plan(spec).findings if "ENDPOINT" in f.code}


def test_a2_validate_says_where_pulumi_up_must_run_for_a_private_endpoint():
    found = _codes(_spec("prod"))
    level, field, message = found["AWS_EKS_ENDPOINT_PRIVATE"]
    assert level is Level.WARNING and field == FIELD
    assert "inside the VPC" in message and "endpointPublicAccessCidrs" in message and "GPUFLEET_RUNNER" in message
    assert _codes(_spec("prod", endpointPublicAccessCidrs=EGRESS)) == {}
    assert _codes(_spec("dev")) == {}, "a Slurm stack has no EKS endpoint"
    assert _codes(_spec("local", type="kubernetes")) == {}, "a simulated stack reaches no EKS"


def test_a2_an_endpoint_open_to_the_internet_is_never_silent():
    found = _codes(_spec("inference", endpointPublicAccessCidrs=["0.0.0.0/0"]))
    assert list(found) == ["AWS_EKS_ENDPOINT_OPEN"] and found["AWS_EKS_ENDPOINT_OPEN"][0] is Level.WARNING
