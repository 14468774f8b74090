"""The AWS API rules of the policy pack (aws-program-review items): each passes on every stack's
captured registrations and fails on a captured registration changed to break it, the way the
program did before its fix, or the way a stack could."""

from __future__ import annotations

import copy

import pytest

from gpufleet import tagging as t
from gpufleet.policies import rules
from gpufleet.policies.evaluate import evaluate
from gpufleet.policies.rules import StackResource


@pytest.fixture(scope="module")
def prod(full_capture):
    return full_capture("prod")


@pytest.fixture(scope="module")
def inference(full_capture):
    return full_capture("inference")


@pytest.fixture(scope="module")
def dev(full_capture):
    return full_capture("dev")


def _stack(cap, mutate=None) -> list[StackResource]:
    out = []
    for r in cap.registrations:
        props = copy.deepcopy({**r.inputs, **r.outputs})
        out.append(StackResource(r.type, r.name, mutate(r, props) if mutate else props))
    return out


def _sg(cap, role):
    return next(r for r in cap.of_type(rules.SECURITY_GROUP) if r.inputs["tags"][t.ROLE] == role)


def test_security_group_descriptions_use_only_ec2_characters(dev):
    """The dev stack's mirror rule once read "HTTP to Ubuntu's package mirrors through NAT"."""
    node = _sg(dev, "node")
    assert rules.sg_description_charset(node.type, node.inputs) == []
    bad = copy.deepcopy(node.inputs)
    bad["egress"][1]["description"] = "HTTP to Ubuntu's package mirrors through NAT"
    found = rules.sg_description_charset(node.type, bad)
    assert len(found) == 1 and "egress[1].description" in found[0] and "[\"'\"]" in found[0]
    bad = copy.deepcopy(node.inputs)
    bad["description"] = "GPU nodes ~ control plane"
    assert rules.sg_description_charset(node.type, bad)


def test_at_most_64_instances_per_capacity_block(inference):
    assert rules.capacity_block_limit(_stack(inference)) == []
    first = next(r.inputs for r in inference.of_type(rules.INSTANCE) if r.inputs.get("instanceMarketOptions"))
    block = first["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"]

    def one_block(r, props):  # what the program did with the single block the stack named
        if props.get("instanceMarketOptions"):
            props["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] = block
        return props
    found = rules.capacity_block_limit(_stack(inference, one_block))
    assert found == [f"125 instances target Capacity Block {block}; a block holds at most 64 "
                     f"({rules.aws.CAPACITY_BLOCK_SOURCE})"]


def test_no_stack_made_placement_group_around_reservations(prod, dev):
    assert rules.placement_with_reservation(_stack(prod)) == []
    assert not prod.of_type(rules.PLACEMENT_GROUP) and dev.of_type(rules.PLACEMENT_GROUP)
    group = "prod-compute-pg"

    def with_group(r, props):  # the program before: its own cluster group on the reserved template
        if r.type == rules.LAUNCH_TEMPLATE:
            props["placement"]["groupName"] = group
        return props
    resources = _stack(prod, with_group) + [StackResource(rules.PLACEMENT_GROUP, group,
                                                          {"name": group, "strategy": "cluster"})]
    found = rules.placement_with_reservation(resources)
    assert len(found) == 1 and "cr-cpg.html" in found[0]
    assert rules.gpu_placement(_stack(prod)) == []  # a reserved template needs no group of ours


def test_fsx_takes_no_backups_when_linked_to_s3(prod):
    assert rules.fsx_feature_combinations(_stack(prod)) == []

    def backups(r, props):  # the program before: 7-day backups and a final backup beside the DRAs
        if r.type == rules.FSX:
            props.update(automaticBackupRetentionDays=7, skipFinalBackup=False)
        return props
    found = rules.fsx_feature_combinations(_stack(prod, backups))
    assert len(found) == 1 and "backups" in found[0] and "fsx-data-repositories.html" in found[0]


def test_intelligent_tiering_settings(prod):
    def tiering(r, props):  # the program before on storageClass INTELLIGENT_TIERING
        if r.type == rules.FSX:
            props.update(storageType="INTELLIGENT_TIERING", metadataConfiguration={"mode": "AUTOMATIC"},
                         automaticBackupRetentionDays=0, skipFinalBackup=True)
            props.pop("dataReadCacheConfiguration", None)
        return props
    found = rules.fsx_feature_combinations(_stack(prod, tiering))
    assert len(found) == 3
    assert any("S3 links" in m for m in found) and any("USER_PROVISIONED" in m for m in found)
    assert any("dataReadCacheConfiguration" in m for m in found)


def test_names_within_service_limits(prod):
    assert rules.name_lengths(_stack(prod)) == []
    cluster = "a" * 36  # the spec allows 40 characters
    renamed = []
    for r in _stack(prod):
        props = dict(r.props)
        if props.get("name") == r.name:  # the mocks answer an autonamed role's name with its logical name
            props["name"] = r.name.replace("prod-", f"{cluster}-", 1)
        if r.type == rules.BUCKET:
            props["bucketPrefix"] = f"gpufleet-{cluster}-"
        renamed.append(StackResource(r.type, r.name.replace("prod-", f"{cluster}-", 1), props))
    found = rules.name_lengths(renamed)
    assert any(f"IAM role {cluster}-storage-clients-role gets a 65-character name" in m for m in found)
    assert any("bucketPrefix" in m and "37" in m for m in found)


def test_eks_nodes_reach_the_private_endpoint_and_the_control_plane_reaches_the_webhooks(prod):
    assert rules.eks_security_group_paths(_stack(prod)) == []

    def no_extra_group(r, props):  # the program before: no security group given to the control plane
        if r.type == rules.EKS_CLUSTER:
            props["vpcConfig"].pop("securityGroupIds", None)
        return props
    found = rules.eks_security_group_paths(_stack(prod, no_extra_group))
    assert len(found) == 1 and "private endpoint" in found[0]

    def no_webhook_port(r, props):  # the program before: 443 and 10250 only
        if r.type == rules.SECURITY_GROUP and props["tags"][t.ROLE] == "node":
            props["ingress"] = [i for i in props["ingress"] if i["fromPort"] != 9443]
        return props
    assert rules.eks_security_group_paths(_stack(prod, no_webhook_port)) == [
        "no security group on the GPU nodes admits the EKS control plane on port 9443 (admission webhook)"]


def test_imds_hop_limit_one_on_gpu_nodes(prod):
    lt = next(iter(prod.of_type(rules.LAUNCH_TEMPLATE)))
    assert rules.imdsv2_required(lt.type, lt.inputs) == []
    bad = copy.deepcopy(lt.inputs)
    bad["metadataOptions"]["httpPutResponseHopLimit"] = 2  # the program before
    found = rules.imdsv2_required(lt.type, bad)
    assert found and "exceeds 1 on a GPU node" in found[0]


@pytest.mark.parametrize("stack", ["prod", "inference", "dev"])
def test_the_offline_preview_judges_the_real_graphs_clean(full_capture, stack):
    cap = full_capture(stack)
    assert evaluate((r.type, r.name, r.inputs, r.outputs) for r in cap.registrations) == []
