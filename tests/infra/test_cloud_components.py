"""The components as registered for every stack file: layout, security, sizing, tags."""

from __future__ import annotations

import ipaddress

from gpufleet.catalog import CATALOG
from gpufleet import tagging as t
from gpufleet.cloud.network import INTERFACE_ENDPOINTS, LUSTRE_PORTS, SYSTEM_NODE_PATHS, extra_subnets
from gpufleet.plan.network import SLURMCTLD_PORT, SRUN_PORTS

LT = "aws:ec2/launchTemplate:LaunchTemplate"
SG = "aws:ec2/securityGroup:SecurityGroup"
INSTANCE = "aws:ec2/instance:Instance"


def _sg(cap, role):
    return next(r for r in cap.of_type(SG) if r.inputs["tags"][t.ROLE] == role)


def test_interface_layout_comes_from_the_catalog(cap):
    lt, = cap.of_type(LT)
    instance = CATALOG[cap.spec.cluster.instance_type]
    got = [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in lt.inputs["networkInterfaces"]]
    assert got == [(s.network_card_index, s.device_index, s.interface_type.value) for s in instance.interfaces]
    assert got[0] == (0, 0, "interface")
    assert sum(1 for g in got if g[2] != "interface") == instance.efa_interfaces


def test_both_security_groups_on_every_interface_and_no_public_ip_parameter(cap):
    lt, = cap.of_type(LT)
    efa, node = _sg(cap, "efa").outputs["id"], _sg(cap, "node").outputs["id"]
    compute = next(r for r in cap.of_type("aws:ec2/subnet:Subnet") if r.inputs["tags"][t.ROLE] == "subnet-compute")
    assert len(lt.inputs["networkInterfaces"]) > 1
    for n in lt.inputs["networkInterfaces"]:
        assert sorted(n["securityGroups"]) == sorted([efa, node])
        # EC2 rejects the parameter on a multi-interface launch: the subnet keeps nodes private
        assert "associatePublicIpAddress" not in n and n["deleteOnTermination"] is True
        assert n["subnetId"] == compute.outputs["id"]
    assert compute.inputs["mapPublicIpOnLaunch"] is False


def test_a_single_interface_layout_still_says_no_public_ip():
    from dataclasses import replace

    from gpufleet.catalog import InterfaceSlot, InterfaceType
    from gpufleet.cloud.compute import network_interfaces

    base = CATALOG["p5.48xlarge"]
    single = replace(base, interfaces=(InterfaceSlot(0, 0, InterfaceType.ENA),))
    one, = network_interfaces(single, "subnet-1", ["sg-1"])
    assert one.associate_public_ip_address is False
    assert all(n.associate_public_ip_address is None for n in network_interfaces(base, "subnet-1", ["sg-1"]))


def test_imdsv2_root_volume_and_placement(cap):
    lt, = cap.of_type(LT)
    md = lt.inputs["metadataOptions"]
    assert (md["httpTokens"], md["httpPutResponseHopLimit"]) == ("required", 1)  # pods never get the node role
    assert all(m["ebs"]["encrypted"] == "true" for m in lt.inputs["blockDeviceMappings"])
    if cap.spec.cluster.capacity.type.value == "on-demand":
        pg, = cap.of_type("aws:ec2/placementGroup:PlacementGroup")
        assert pg.inputs["strategy"] == "cluster"
        assert lt.inputs["placement"] == {"groupName": pg.inputs["name"], "availabilityZone": cap.plan.availability_zone}
    else:  # reserved capacity is placed by AWS: a group of ours around it only costs capacity
        assert cap.of_type("aws:ec2/placementGroup:PlacementGroup") == []
        assert lt.inputs["placement"] == {"availabilityZone": cap.plan.availability_zone}
    assert {i.inputs["availabilityZone"] for i in cap.of_type(INSTANCE)} == {cap.plan.availability_zone}


def test_subnets_match_the_plan_and_never_map_public_ips(cap):
    subnets = {r.inputs["tags"][t.ROLE]: r.inputs for r in cap.of_type("aws:ec2/subnet:Subnet")}
    assert subnets["subnet-compute"]["cidrBlock"] == cap.plan.network.compute.cidr
    assert subnets["subnet-compute"]["availabilityZone"] == cap.plan.availability_zone
    assert subnets["subnet-management"]["cidrBlock"] == cap.plan.network.management.cidr
    assert all(s["mapPublicIpOnLaunch"] is False for s in subnets.values())
    assert ("subnet-control-plane" in subnets) == (cap.spec.pool.type == "kubernetes")
    vpc = ipaddress.IPv4Network(cap.spec.network.vpc_cidr)
    nets = [ipaddress.IPv4Network(s["cidrBlock"]) for s in subnets.values()]
    assert all(n.subnet_of(vpc) for n in nets)
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])


def test_efa_group_is_self_only_and_node_group_is_narrow(cap):
    efa = _sg(cap, "efa").inputs
    for rule in efa["ingress"] + efa["egress"]:
        assert rule["self"] is True and rule["protocol"] == "-1" and not rule.get("cidrBlocks")
    node = _sg(cap, "node").inputs
    mgmt = cap.plan.network.management.cidr
    ssh = [r for r in node["ingress"] if r["fromPort"] == 22]
    assert ssh and all(r["cidrBlocks"] == [mgmt] for r in ssh)
    slurm = {(SLURMCTLD_PORT, SLURMCTLD_PORT), SRUN_PORTS} if cap.spec.pool.type == "slurm" else set()
    ubuntu = cap.spec.image.os.startswith("ubuntu")  # its EC2 apt mirrors are plain HTTP
    # EKS: CoreDNS and the launcher's ports on the system nodes in the management subnet (review A4)
    system = {(p, lo, hi) for p, lo, hi, _ in SYSTEM_NODE_PATHS} if cap.spec.pool.type == "kubernetes" else set()
    assert all(r["fromPort"] == r["toPort"] == 443 or (r["fromPort"], r["toPort"]) in LUSTRE_PORTS
               or ((r["fromPort"], r["toPort"]) in slurm and r["cidrBlocks"] == [mgmt])
               or ((r["protocol"], r["fromPort"], r["toPort"]) in system and r["cidrBlocks"] == [mgmt])
               or (ubuntu and r["fromPort"] == r["toPort"] == 80) for r in node["egress"])
    groups = [node] + ([_sg(cap, "slurm-controller").inputs] if slurm else [])
    assert all(any(r["fromPort"] == 80 for r in g["egress"]) == ubuntu for g in groups)
    assert slurm <= {(r["fromPort"], r["toPort"]) for r in node["egress"]}
    assert system <= {(r["protocol"], r["fromPort"], r["toPort"]) for r in node["egress"]}
    ports = {(r["fromPort"], r["toPort"]) for r in node["ingress"]}
    eks = cap.spec.pool.type == "kubernetes"
    assert ((443, 443) in ports and (10250, 10250) in ports) == eks
    lustre = _sg(cap, "lustre").inputs
    assert {(r["fromPort"], r["toPort"]) for r in lustre["ingress"]} == set(LUSTRE_PORTS)


def test_egress_through_nat_and_endpoints(cap):
    endpoints = cap.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    services = {e.inputs["serviceName"].rsplit(f"{cap.plan.region}.", 1)[1]: e.inputs for e in endpoints}
    assert set(services) == {"s3", *INTERFACE_ENDPOINTS}
    assert services["s3"]["vpcEndpointType"] == "Gateway"
    assert all(services[s]["privateDnsEnabled"] is True for s in INTERFACE_ENDPOINTS)
    nat, = cap.of_type("aws:ec2/natGateway:NatGateway")
    public = next(r for r in cap.of_type("aws:ec2/subnet:Subnet") if r.inputs["tags"][t.ROLE] == "subnet-public")
    assert nat.inputs["subnetId"] == public.outputs["id"]


def test_fsx_sized_by_the_plan(cap):
    fsx, = cap.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    s = cap.plan.storage
    assert fsx.inputs["deploymentType"] == "PERSISTENT_2"
    assert fsx.inputs["storageCapacity"] == s.capacity_gib
    assert fsx.inputs["perUnitStorageThroughput"] == s.throughput_per_tib
    assert fsx.inputs["dataCompressionType"] == "LZ4"
    assert fsx.inputs.get("efaEnabled", False) == s.efa_enabled
    # linked to S3 (every stack here): FSx takes no backups, the versioned bucket is the durable copy
    assert fsx.inputs["skipFinalBackup"] is True and fsx.options["protect"] is True
    assert (_sg(cap, "efa").outputs["id"] in fsx.inputs["securityGroupIds"]) == s.efa_enabled
    paths = [d.inputs["fileSystemPath"] for d in cap.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")]
    assert 1 <= len(paths) <= 8 and len(set(paths)) == len(paths)


def test_every_taggable_resource_carries_the_stack_tags(cap):
    from gpufleet.policies.rules import TAGGED_TYPES

    tagged = [r for r in cap.registrations if r.type in TAGGED_TYPES]
    assert len(tagged) > 20
    for r in tagged:
        assert r.inputs["tags"][t.STACK] == cap.stack and r.inputs["tags"][t.MANAGED_BY] == "gpufleet", r.name
    provider, = cap.of_type("pulumi:providers:aws")
    assert "gpufleet.io/stack" in provider.inputs["defaultTags"]


def test_instances_are_the_plan_slots_with_their_tags(cap):
    instances = {i.name: i.inputs for i in cap.of_type(INSTANCE) if i.inputs["tags"][t.ROLE] == "gpu-node"}
    assert sorted(instances) == sorted(s.name for s in cap.plan.nodes)
    for slot in cap.plan.nodes[:: max(1, len(cap.plan.nodes) // 7)]:
        tags = instances[slot.name]["tags"]
        assert (tags[t.SLOT], tags[t.BATCH], tags[t.BLOCK]) == (slot.name, str(slot.batch), str(slot.block))
    inventory = cap.outputs["nodes"]
    assert sum(len(v) for v in inventory.values()) == len(cap.plan.nodes)
    assert len({row["privateIp"] for rows in inventory.values() for row in rows}) == len(cap.plan.nodes)


def test_capacity_is_targeted_never_bought(cap):
    types = {r.type for r in cap.registrations}
    assert not {"aws:ec2/capacityReservation:CapacityReservation",
                "aws:ec2/capacityBlockReservation:CapacityBlockReservation"} & types
    lt, = cap.of_type(LT)
    cap_cfg = cap.spec.cluster.capacity
    ids = cap_cfg.capacity_block_ids or cap_cfg.reservation_ids
    target = (lt.inputs.get("capacityReservationSpecification") or {}).get("capacityReservationTarget")
    assert (target is not None) == bool(ids)
    market = (lt.inputs.get("instanceMarketOptions") or {}).get("marketType")
    assert market == ("capacity-block" if cap_cfg.type.value == "capacity-block" else None)
    used = {(i.inputs.get("capacityReservationSpecification") or {}).get("capacityReservationTarget", {})
            .get("capacityReservationId") for i in cap.of_type(INSTANCE) if i.inputs["tags"][t.ROLE] == "gpu-node"}
    assert used == (set(ids) if ids else {None})


def test_eks_only_for_kubernetes_pools(cap):
    eks = cap.of_type("aws:eks/cluster:Cluster")
    if cap.spec.pool.type != "kubernetes":
        assert not eks and "kubeconfig" not in cap.outputs
        return
    cluster, = eks
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    entry, = cap.of_type("aws:eks/accessEntry:AccessEntry")
    role = next(r for r in cap.of_type("aws:iam/role:Role") if r.inputs["tags"][t.ROLE] == "node-role")  # the GPU nodes'
    assert "ec2.amazonaws.com" in role.inputs["assumeRolePolicy"]
    assert entry.inputs["type"] == "EC2_LINUX" and entry.inputs["principalArn"] == role.outputs["arn"]
    assert cap.of_type("pulumi:providers:kubernetes")
    assert '"exec"' in cap.outputs["kubeconfig"]


def test_extra_subnets_avoid_the_planned_ones():
    extra = extra_subnets("10.0.0.0/16", ["10.0.0.0/20", "10.0.255.0/24"])
    assert (extra.public, extra.control_plane) == ("10.0.254.240/28", "10.0.254.224/28")
