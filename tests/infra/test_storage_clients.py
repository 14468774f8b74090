"""The storage base check's clients in the real program under Pulumi mocks: created with the base at
batch target 0 (and no GPU node), parented, hardened and tagged; their stack export; the stack
fields and the plan's warning when they cannot reach the check's floor."""

from __future__ import annotations

import pytest

from gpufleet import tagging as t
from gpufleet.catalog import get as instance_type
from gpufleet.program.capture import capture_program
from gpufleet.cloud.plain_instance import AMI_PARAMETERS
from gpufleet.errors import ConfigError
from gpufleet.plan import build_plan
from gpufleet.catalog import CLIENT_TYPE_GBPS
from gpufleet.plan.storage_clients import client_type_mbs, storage_client_findings
from gpufleet.spec import ClusterSpec, load_stack

INSTANCE = "aws:ec2/instance:Instance"
SG = "aws:ec2/securityGroup:SecurityGroup"


@pytest.fixture(scope="module")
def base():
    """dev (a Slurm stack) with no GPU batch: the network, storage, controller and the clients."""
    return capture_program("dev", target_batch=0)


def _by_role(cap, role: str):
    return [r for r in cap.of_type(INSTANCE) if r.inputs["tags"][t.ROLE] == role]


def test_target_0_builds_the_base_and_the_clients_and_no_gpu_node(base):
    assert _by_role(base, "gpu-node") == [] and base.outputs["nodes"] == {}
    clients = _by_role(base, "storage-client")
    assert sorted(c.name for c in clients) == [f"dev-storage-client-{i}" for i in range(4)]
    assert {r.type for r in base.registrations} >= {"aws:fsx/lustreFileSystem:LustreFileSystem", SG}
    assert len(_by_role(base, "slurm-controller")) == 1
    assert base.outputs["storageClients"] == {c.name: {"instanceId": c.outputs["id"],
                                                       "privateIp": c.outputs["privateIp"]} for c in clients}


def test_the_clients_are_children_of_the_component_hardened_and_in_the_compute_subnet(base):
    component, = base.of_type("gpufleet:storage:Clients")
    subnet = next(r for r in base.of_type("aws:ec2/subnet:Subnet") if r.inputs["tags"][t.ROLE] == "subnet-compute")
    node_sg = next(r for r in base.of_type(SG) if r.inputs["tags"][t.ROLE] == "node")
    profile = next(r for r in base.of_type("aws:iam/instanceProfile:InstanceProfile")
                   if r.inputs["tags"][t.ROLE] == "storage-client-profile")
    role = next(r for r in base.of_type("aws:iam/role:Role") if r.inputs["tags"][t.ROLE] == "storage-client-role")
    attached = [r.inputs["policyArn"] for r in base.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if r.parent == component.urn]
    assert attached == ["arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"]  # no bucket, no secret
    assert not [r for r in base.of_type("aws:iam/rolePolicy:RolePolicy") if r.parent == component.urn]
    assert profile.parent == role.parent == component.urn
    for c in _by_role(base, "storage-client"):
        i = c.inputs
        assert c.parent == component.urn and c.options["ignoreChanges"] == ["ami"]
        assert i["instanceType"] == "c6in.8xlarge" and i["subnetId"] == subnet.outputs["id"]
        assert i["vpcSecurityGroupIds"] == [node_sg.outputs["id"]]  # Lustre to the compute subnet, SSH, HTTPS
        assert i["availabilityZone"] == base.plan.availability_zone and i["associatePublicIpAddress"] is False
        assert (i["metadataOptions"]["httpTokens"], i["metadataOptions"]["httpPutResponseHopLimit"]) == ("required", 1)
        assert i["rootBlockDevice"]["encrypted"] is True and i["iamInstanceProfile"] == profile.outputs["name"]
        assert i["tags"][t.STACK] == "dev" and i["tags"]["Name"] == c.name and t.SLOT not in i["tags"]


def test_the_clients_boot_the_plain_image_of_the_stacks_os(base):
    head, = _by_role(base, "slurm-controller")  # the controller's plain image (plain_instance.AMI_PARAMETERS)
    assert {c.inputs["ami"] for c in _by_role(base, "storage-client")} == {head.inputs["ami"]}
    prod = capture_program("prod", target_batch=1)  # al2023: the GPU nodes boot the EKS NVIDIA image
    gpu_amis = {r.inputs["ami"] for r in _by_role(prod, "gpu-node")}
    client_amis = {r.inputs["ami"] for r in _by_role(prod, "storage-client")}
    assert len(client_amis) == 1 and gpu_amis and not gpu_amis & client_amis
    assert AMI_PARAMETERS[prod.spec.image.os].endswith("al2023-ami-kernel-default-x86_64")


def test_count_and_type_follow_the_stack_and_an_unknown_type_is_refused():
    acceptance = {"storageClients": 2, "storageClientType": "c6in.16xlarge"}
    cap = capture_program("dev", target_batch=0, overrides={"acceptance": acceptance})
    clients = _by_role(cap, "storage-client")
    assert len(clients) == 2 and {c.inputs["instanceType"] for c in clients} == {"c6in.16xlarge"}
    with pytest.raises(ConfigError, match="storageClientType 'p5.48xlarge' is not one of c6in.8xlarge"):
        capture_program("dev", target_batch=0, overrides={"acceptance": {"storageClientType": "p5.48xlarge"}})


def _with(spec: ClusterSpec, **acceptance) -> ClusterSpec:
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["acceptance"] = {**raw.get("acceptance", {}), **acceptance}
    return ClusterSpec.from_raw(raw, source="test")


def test_the_plan_warns_when_the_clients_cannot_draw_what_the_file_system_is_sized_for():
    prod = load_stack("prod")  # 135,937 MB/s sized: beyond 4 x 6,250 MB/s, and beyond 4 of the largest
    finding, = [f for f in build_plan(prod).findings if f.code == "STORAGE_CLIENTS_TOO_SLOW"]
    assert finding.level.value == "WARNING" and finding.field == "gpufleet:acceptance.storageClientType"
    assert "4 x c6in.8xlarge draw at most 25000 MB/s of the 135937 MB/s" in finding.message
    assert finding.message.endswith("6 x c6in.32xlarge would")
    enough = _with(prod, storageClients=6, storageClientType="c6in.32xlarge")
    assert not [f for f in build_plan(enough).findings if f.code == "STORAGE_CLIENTS_TOO_SLOW"]
    plan = build_plan(load_stack("dev"))  # a small file system: one client type up is enough, and it says which
    findings = storage_client_findings(plan.storage.model_copy(update={"aggregate_throughput_mbs": 15_000}),
                                       2, "c6in.8xlarge")
    assert len(findings) == 1 and findings[0].message.endswith("2 x c6in.12xlarge would")
    assert storage_client_findings(plan.storage, 4, "c6in.8xlarge") == []
    assert client_type_mbs("c6in.8xlarge") == 6250 and list(CLIENT_TYPE_GBPS.values()) == [50, 75, 100, 150, 200]


def test_the_storage_check_judges_the_file_system_at_what_its_clients_can_draw():
    """Dedicated clients slower than the file system do not fail it: the floor is theirs."""
    from gpufleet.gates import acceptance as A

    plan = build_plan(load_stack("prod"))
    sku = instance_type("p5.48xlarge")
    assert A.expected_storage_mbs(plan.storage, sku, 4, per_client_mbs=6250) == 25_000
    assert A.expected_storage_mbs(plan.storage, sku, 4) == plan.storage.aggregate_throughput_mbs


def test_a_simulated_stack_gets_no_client_warning():
    local = _with(load_stack("local"), storageClients=1)
    assert local.simulated and not [f for f in build_plan(local).findings if f.code == "STORAGE_CLIENTS_TOO_SLOW"]


def test_the_mocks_hand_out_addresses_to_instances_registered_from_several_threads_at_once():
    """The engine registers resources from a thread pool; the storage clients' addresses come from
    one generator, and two draws at once raised "generator already executing" (a full-suite run
    under load). Each draw here takes a while, so concurrent draws would overlap without the lock."""
    import threading
    import time

    import pulumi

    from gpufleet.program.capture import GpufleetMocks

    plan = build_plan(load_stack("local"))
    mocks = GpufleetMocks(plan, "local", None)

    def slow(addresses):
        for a in addresses:
            time.sleep(0.02)
            yield a
    mocks.client_ips = slow(iter(mocks.client_ips))
    got, errors = [], []

    def register(i: int) -> None:
        args = pulumi.runtime.MockResourceArgs(typ="aws:ec2/instance:Instance", name=f"client-{i}", inputs={
            "tags": {t.ROLE: "storage-client"}}, provider="", resource_id="", custom=True)
        try:
            got.append(mocks.new_resource(args)[1]["privateIp"])
        except ValueError as exc:
            errors.append(str(exc))
    threads = [threading.Thread(target=register, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(set(got)) == 8, (errors, got)
