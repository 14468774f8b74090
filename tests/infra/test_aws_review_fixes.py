"""The program's graph after the AWS review's fixes (shared/reference/reviews/aws-program-review.md):
each test reads the registrations the real program makes under mocks and fails on the graph the
program made before its fix (the item is named in each docstring)."""

from __future__ import annotations

import email
import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from gpufleet import aws_rules
from gpufleet import tagging as t
from gpufleet.errors import ConfigError
from gpufleet.program.capture import capture_program

SG = "aws:ec2/securityGroup:SecurityGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"


@pytest.fixture(scope="module")
def prod(full_capture):
    return full_capture("prod")


@pytest.fixture(scope="module")
def inference(full_capture):
    return full_capture("inference")


@pytest.fixture(scope="module")
def dev(full_capture):
    return full_capture("dev")


def _sg(cap, role):
    return next(r for r in cap.of_type(SG) if r.inputs["tags"][t.ROLE] == role)


def _gpu_nodes(cap):
    return [i for i in cap.of_type(INSTANCE) if i.inputs["tags"][t.ROLE] == "gpu-node"]


def _node_config(instance) -> dict:
    msg = email.message_from_string(instance.inputs["userData"])
    part = next(p for p in msg.get_payload() if p.get_content_type() == "application/node.eks.aws")
    return yaml.safe_load(part.get_payload())


def _max_pods(instance) -> str | None:
    flags = dict(f.removeprefix("--").split("=", 1) for f in _node_config(instance)["spec"]["kubelet"]["flags"])
    return flags.get("max-pods")


def _cluster(cap, **changes):
    raw = cap.spec.model_dump(mode="json", by_alias=True, exclude_none=True)["cluster"]
    return {**raw, **changes}


def _ports(rules, source_key=None, source=None):
    return {r["fromPort"] for r in rules if source_key is None or source in (r.get(source_key) or [])}


# --- A1 / A2 / A3: security-group paths of an EKS pool -------------------------------------------

def test_a1_the_control_plane_group_admits_the_gpu_nodes_on_443(prod):
    eks, = prod.of_type("aws:eks/cluster:Cluster")
    cp = _sg(prod, "eks-control-plane")
    node = _sg(prod, "node")
    assert eks.inputs["vpcConfig"]["securityGroupIds"] == [cp.outputs["id"]]
    assert 443 in _ports(cp.inputs["ingress"], "securityGroups", node.outputs["id"])


def test_a2_the_private_endpoint_admits_the_management_subnet(prod):
    """`pulumi up` and the rollout reach the private endpoint from a runner in the management subnet."""
    eks, = prod.of_type("aws:eks/cluster:Cluster")
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is False
    cp = _sg(prod, "eks-control-plane")
    assert 443 in _ports(cp.inputs["ingress"], "cidrBlocks", prod.plan.network.management.cidr)


def test_a3_the_control_plane_reaches_the_kueue_webhook_on_the_nodes(prod):
    node = _sg(prod, "node")
    from_cp = [r for r in node.inputs["ingress"] if "EKS control plane" in r["description"]]
    assert {443, 10250, 9443} <= _ports(from_cp)
    assert all(prod.plan.network.management.cidr in r["cidrBlocks"] for r in from_cp)
    cp = _sg(prod, "eks-control-plane")
    assert 9443 in _ports(cp.inputs["egress"], "cidrBlocks", prod.plan.network.compute.cidr)


# --- A4: a system node group the add-ons can run on ---------------------------------------------

def test_a4_an_untainted_system_node_group_exists_before_any_gpu_node():
    cap = capture_program("prod", target_batch=0)
    assert _gpu_nodes(cap) == []
    group, = cap.of_type("aws:eks/nodeGroup:NodeGroup")
    assert not group.inputs.get("taints")
    assert group.inputs["scalingConfig"]["minSize"] >= 2
    mgmt = next(r for r in cap.of_type("aws:ec2/subnet:Subnet") if r.inputs["tags"][t.ROLE] == "subnet-management")
    assert group.inputs["subnetIds"] == [mgmt.outputs["id"]]
    provider = next(r for r in cap.registrations if r.type == "pulumi:providers:kubernetes")
    assert group.urn in provider.options["dependsOn"]  # every Helm release waits for these nodes


# --- A5: description characters ------------------------------------------------------------------

def test_a5_every_security_group_description_is_one_ec2_accepts(cap):
    texts = [r.inputs.get("description", "") for r in cap.of_type(SG)]
    texts += [rule.get("description", "") for r in cap.of_type(SG)
              for rule in r.inputs.get("ingress", []) + r.inputs.get("egress", [])]
    assert texts and all(aws_rules.SG_DESCRIPTION.match(x) for x in texts), [
        x for x in texts if not aws_rules.SG_DESCRIPTION.match(x)]


# --- A6: Capacity Blocks ---------------------------------------------------------------------------

def test_a6_no_capacity_block_gets_more_than_64_instances(inference):
    per_block: dict[str, int] = {}
    for i in _gpu_nodes(inference):
        block = i.inputs["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"]
        per_block[block] = per_block.get(block, 0) + 1
    assert len(per_block) == 3 and max(per_block.values()) <= 64 and sum(per_block.values()) == 125


def test_a6_one_block_for_129_instances_stops_the_program(inference):
    capacity = {"type": "capacity-block", "capacityBlockIds": ["cr-0123456789abcdef0"]}
    with pytest.raises(ConfigError, match="AWS_CAPACITY_BLOCK_TOO_SMALL") as err:
        capture_program("inference", target_batch=1, overrides={"cluster": _cluster(inference, capacity=capacity)})
    assert "129 instances" in str(err.value) and "name at least 3" in str(err.value)


# --- A7 / A8: FSx feature combinations -------------------------------------------------------------

def test_a8_an_s3_linked_file_system_asks_for_no_backups(prod):
    fsx, = prod.of_type(FSX)
    assert prod.of_type(DRA)
    assert fsx.inputs["automaticBackupRetentionDays"] == 0 and fsx.inputs["skipFinalBackup"] is True


def test_a7_intelligent_tiering_has_user_provisioned_metadata_a_read_cache_and_no_s3_links(prod):
    storage = {**prod.spec.model_dump(mode="json", by_alias=True, exclude_none=True)["storage"],
               "storageClass": "INTELLIGENT_TIERING", "efaEnabled": False}
    for key in ("throughputPerTib", "importPath", "exportPath"):
        storage.pop(key, None)
    cap = capture_program("prod", target_batch=1, overrides={"storage": storage})
    fsx, = cap.of_type(FSX)
    assert fsx.inputs["metadataConfiguration"] == {"mode": "USER_PROVISIONED", "iops": 6000}
    assert fsx.inputs["dataReadCacheConfiguration"] == {"sizingMode": "PROPORTIONAL_TO_THROUGHPUT_CAPACITY"}
    assert cap.of_type(DRA) == []
    assert fsx.inputs["automaticBackupRetentionDays"] > 0  # unlinked: backups are supported
    policy = next(r for r in cap.of_type("aws:iam/rolePolicy:RolePolicy") if "BucketObjects" in r.inputs["policy"])
    assert json.loads(policy.inputs["policy"])["Statement"][1]["Resource"]  # the nodes keep the bucket


def test_a7_intelligent_tiering_with_s3_paths_is_refused(prod):
    storage = {**prod.spec.model_dump(mode="json", by_alias=True, exclude_none=True)["storage"],
               "storageClass": "INTELLIGENT_TIERING", "efaEnabled": False, "importPath": "s3://datasets-bucket/train"}
    with pytest.raises(ConfigError, match="AWS_FSX_TIERING_S3_LINK"):
        capture_program("prod", target_batch=1, overrides={"storage": storage})


# --- A9: name lengths ------------------------------------------------------------------------------

def test_a9_the_longest_allowed_cluster_name_fits_every_generated_name(dev):
    name = "d" * 35
    cap = capture_program("dev", target_batch=1, overrides={"cluster": _cluster(dev, name=name)})
    bucket, = cap.of_type("aws:s3/bucket:Bucket")
    assert len(bucket.inputs["bucketPrefix"]) <= 37
    roles = cap.of_type("aws:iam/role:Role")
    assert roles and all(len(r.name) + aws_rules.AUTONAME_SUFFIX <= 64 for r in roles if not r.inputs.get("name"))


def test_a9_a_cluster_name_whose_role_names_overflow_is_refused(dev):
    with pytest.raises(ConfigError, match="AWS_NAME_TOO_LONG"):
        capture_program("dev", target_batch=1, overrides={"cluster": _cluster(dev, name="d" * 36)})


# --- B1 / B7: placement groups ---------------------------------------------------------------------

def test_b1_reserved_capacity_gets_no_placement_group_of_ours(prod, inference):
    for cap in (prod, inference):
        assert cap.of_type("aws:ec2/placementGroup:PlacementGroup") == []
        lt, = cap.of_type(LT)
        assert "groupName" not in lt.inputs["placement"]
        assert all("placementGroup" not in i.inputs for i in _gpu_nodes(cap))


def test_b1_b7_an_on_demand_fleet_sits_in_its_group_on_the_template_and_the_instance(dev):
    pg, = dev.of_type("aws:ec2/placementGroup:PlacementGroup")
    lt, = dev.of_type(LT)
    assert lt.inputs["placement"]["groupName"] == pg.inputs["name"]
    assert {i.inputs["placementGroup"] for i in _gpu_nodes(dev)} == {pg.inputs["name"]}


# --- B3: pod IPs ---------------------------------------------------------------------------------

def test_b3_kubelet_gets_the_stacks_max_pods_capped_at_the_cni_budget(prod, inference):
    """p5: the efa-only interface takes card 0's second ENI, leaving 49 pod IPs (+2 host-network pods);
    nodeadm's own default was 100. p5en: 3 usable ENIs, 147 IPs, so the stack's 110 stands."""
    assert {_max_pods(i) for i in _gpu_nodes(prod)} == {"51"}
    assert {_max_pods(i) for i in _gpu_nodes(inference)} == {"110"}
    assert [f.code for f in prod.plan.findings if f.code == "AWS_POD_IP_BUDGET"] == ["AWS_POD_IP_BUDGET"]


def test_b3_the_warm_ip_target_reaches_aws_node(prod):
    addon, = prod.of_type("aws:eks/addon:Addon")
    assert addon.inputs["addonName"] == "vpc-cni"
    env = json.loads(addon.inputs["configurationValues"])["env"]
    assert env["WARM_IP_TARGET"] == str(prod.spec.network.pod_networking.warm_ip_target) == "8"


# --- B5: Prometheus on Slurm stacks ---------------------------------------------------------------

def test_b5_prometheus_on_the_controller_reaches_both_exporters(dev):
    node, ctl = _sg(dev, "node"), _sg(dev, "slurm-controller")
    assert {9100, 9400} <= _ports(node.inputs["ingress"], "cidrBlocks", dev.plan.network.management.cidr)
    assert {9100, 9400} <= _ports(ctl.inputs["egress"], "securityGroups", node.outputs["id"])


# --- B6: IMDS ------------------------------------------------------------------------------------

def test_b6_gpu_nodes_answer_imds_one_hop_only(cap):
    for lt in cap.of_type(LT):
        assert lt.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1


# --- B9: the second EKS zone ----------------------------------------------------------------------

def test_b9_the_control_plane_subnet_is_in_a_standard_zone(prod):
    """The mocked region lists an opted-in Local Zone first, as EC2 can; only standard zones EKS supports are asked for."""
    subnet = next(r for r in prod.of_type("aws:ec2/subnet:Subnet") if r.inputs["tags"][t.ROLE] == "subnet-control-plane")
    assert subnet.inputs["availabilityZone"] != prod.plan.availability_zone
    assert "lax" not in subnet.inputs["availabilityZone"]
    assert ipaddress.ip_network(subnet.inputs["cidrBlock"]).prefixlen == 28


# --- item 3: the rules as `gpufleet validate` findings; `preview --offline` refuses like `pulumi preview` ---

def test_the_pod_ip_budget_per_instance_type():
    """Card-0 ENIs (nodeadm's defaultMaxENIs) less the efa-only interface, times 49 secondary IPs."""
    from gpufleet.catalog import CATALOG

    budgets = {name: aws_rules.pod_ip_budget(CATALOG[name]) for name in aws_rules.CARD0_MAX_ENIS}
    assert {n: (b.usable_enis, b.pod_ips, b.max_pods) for n, b in budgets.items()} == {
        "p4d.24xlarge": (14, 686, 688), "p4de.24xlarge": (14, 686, 688), "p5.48xlarge": (1, 49, 51),
        "p5e.48xlarge": (1, 49, 51), "p5en.48xlarge": (3, 147, 149)}


def test_validate_names_each_aws_rule_a_stack_breaks(tmp_path):
    from click.testing import CliRunner

    from gpufleet.cli import main

    stacks = tmp_path / "stacks"
    stacks.mkdir()
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.inference.yaml").read_text())
    doc["config"]["gpufleet:cluster"]["capacity"]["capacityBlockIds"] = ["cr-0123456789abcdef0"]
    (stacks / "Pulumi.inference.yaml").write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(main, ["validate", "-s", "inference", "--stacks-dir", str(stacks), "--json"])
    assert result.exit_code == 2, result.output
    found = {f["code"]: f for f in json.loads(result.output)["findings"]}
    block = found["AWS_CAPACITY_BLOCK_TOO_SMALL"]
    assert (block["level"], block["field"]) == ("ERROR", "gpufleet:cluster.capacity.capacityBlockIds")
    assert "ec2-capacity-blocks.html" in block["message"]
    preview = CliRunner().invoke(main, ["preview", "-s", "inference", "--offline", "--stacks-dir", str(stacks)])
    assert preview.exit_code == 2 and "AWS_CAPACITY_BLOCK_TOO_SMALL" in preview.output


def test_b4_an_efa_enabled_file_system_no_longer_warns_of_tcp_clients(prod, dev):
    """Fixed: the lustre_client role configures LNet over EFA for an EFA-enabled file system
    (tests/configure/test_lustre_efa.py), so the TCP warning is gone."""
    assert prod.spec.storage.efa_enabled
    assert not [f for f in prod.plan.findings if f.code.startswith("AWS_FSX_EFA")]
    assert not [f for f in dev.plan.findings if f.code.startswith("AWS_FSX_EFA")]
