"""Each rule: passes on the real program's registration, fails on a mutated copy of it.

The violating cases start from a registration captured from the program (camelCase inputs,
as the engine sends them), never from a hand-written dict.
"""

from __future__ import annotations

import copy
import json

import pytest
from pulumi_policy import EnforcementLevel

from gpufleet import tagging as t
from gpufleet.policies import rules
from gpufleet.policies.evaluate import evaluate
from gpufleet.policies.pack import policies
from gpufleet.policies.rules import StackResource


@pytest.fixture(scope="module")
def prod(full_capture):
    return full_capture("prod")


def _one(cap, typ, role=None):
    return next(r for r in cap.of_type(typ) if role is None or (r.inputs.get("tags") or {}).get(t.ROLE) == role)


def _stack(cap, mutate=None):
    out = []
    for r in cap.registrations:
        props = copy.deepcopy({**r.inputs, **r.outputs})
        if mutate:
            props = mutate(r, props)
        out.append(StackResource(r.type, r.name, props))
    return out


def _check(rule_fn, reg, mutate):
    assert rule_fn(reg.type, reg.inputs) == []
    bad = copy.deepcopy(reg.inputs)
    mutate(bad)
    assert rule_fn(reg.type, bad), f"{rule_fn.__name__} accepted the mutation"


def test_efa_layout(prod):
    lt = _one(prod, rules.LAUNCH_TEMPLATE)
    _check(rules.efa_layout, lt, lambda p: p["networkInterfaces"].pop())
    _check(rules.efa_layout, lt, lambda p: p["networkInterfaces"][1].update(interfaceType="interface"))


def test_efa_sg_self_only(prod):
    sg = _one(prod, rules.SECURITY_GROUP, "efa")
    _check(rules.efa_sg_self_only, sg, lambda p: p["ingress"][0].update(cidrBlocks=["0.0.0.0/0"]))
    _check(rules.efa_sg_self_only, sg, lambda p: p.update(egress=[]))


def test_imdsv2(prod):
    lt = _one(prod, rules.LAUNCH_TEMPLATE)
    _check(rules.imdsv2_required, lt, lambda p: p["metadataOptions"].update(httpTokens="optional"))
    _check(rules.imdsv2_required, lt, lambda p: p["metadataOptions"].update(httpPutResponseHopLimit=2))


def test_no_public_ip(prod):
    _check(rules.no_public_ip, _one(prod, rules.LAUNCH_TEMPLATE),
           lambda p: p["networkInterfaces"][0].update(associatePublicIpAddress=True))
    _check(rules.no_public_ip, _one(prod, rules.SUBNET, "subnet-compute"), lambda p: p.update(mapPublicIpOnLaunch=True))
    _check(rules.no_public_ip, _one(prod, rules.SUBNET, "subnet-management"), lambda p: p.pop("mapPublicIpOnLaunch"))
    _check(rules.no_public_ip, _one(prod, rules.INSTANCE), lambda p: p.update(associatePublicIpAddress=True))


@pytest.mark.parametrize("value", [False, True])
def test_public_ip_parameter_on_a_multi_interface_template(prod, value):
    lt = _one(prod, rules.LAUNCH_TEMPLATE)
    _check(rules.public_ip_param_multi_interface, lt,
           lambda p: p["networkInterfaces"][3].update(associatePublicIpAddress=value))
    one = copy.deepcopy(lt.inputs)  # a single interface may carry it: EC2 accepts that launch
    one["networkInterfaces"] = [{**one["networkInterfaces"][0], "associatePublicIpAddress": False}]
    assert rules.public_ip_param_multi_interface(lt.type, one) == []


def test_storage_encrypted(prod):
    _check(rules.storage_encrypted, _one(prod, rules.FSX), lambda p: p.update(deploymentType="SCRATCH_1"))
    _check(rules.storage_encrypted, _one(prod, rules.LAUNCH_TEMPLATE),
           lambda p: p["blockDeviceMappings"][0]["ebs"].update(encrypted="false"))


def test_secret_in_user_data(prod):
    inst = _one(prod, rules.INSTANCE, "gpu-node")
    _check(rules.no_secret_in_user_data, inst,
           lambda p: p.update(userData=p["userData"] + "\nexport AWS_ACCESS_KEY_ID=AKIAABCDEFGHIJKLMNOP\n"))
    _check(rules.no_secret_in_user_data, inst,
           lambda p: p.update(userData=p["userData"] + "\n-----BEGIN OPENSSH PRIVATE KEY-----\n"))


def test_required_tags(prod, full_capture):
    _check(rules.required_tags, _one(prod, rules.INSTANCE, "gpu-node"), lambda p: p["tags"].pop(t.SLOT))
    head = _one(full_capture("dev"), rules.INSTANCE, "slurm-controller")  # not a GPU node: no slot tags
    _check(rules.required_tags, head, lambda p: p["tags"].pop(t.STACK))
    _check(rules.required_tags, head, lambda p: p.update(instanceType="p5.48xlarge"))
    _check(rules.required_tags, _one(prod, rules.FSX), lambda p: p["tags"].update({t.MANAGED_BY: "hand"}))


def test_fsx_throughput(prod):
    fsx = _one(prod, rules.FSX)
    _check(rules.fsx_throughput, fsx, lambda p: p.update(perUnitStorageThroughput=200))
    _check(rules.fsx_throughput, fsx, lambda p: p.update(storageCapacity=p["storageCapacity"] + 2400))


def test_iam_no_star_on_star(prod):
    pol = _one(prod, "aws:iam/rolePolicy:RolePolicy")

    def widen(p):
        doc = json.loads(p["policy"])
        doc["Statement"].append({"Effect": "Allow", "Action": "*", "Resource": "*"})
        p["policy"] = json.dumps(doc)
    _check(rules.iam_no_star, pol, widen)


def test_placement_one_az(prod, full_capture):
    """An on-demand fleet (dev) sits in the cluster group it creates; reserved capacity (prod) is
    placed by AWS, so only the one-AZ rule applies to it."""
    dev = full_capture("dev")
    assert rules.gpu_placement(_stack(prod)) == [] and rules.gpu_placement(_stack(dev)) == []

    def other_az(r, props):
        if r.type == rules.INSTANCE and r.name.endswith("n00007"):
            props["availabilityZone"] = "us-east-2b"
        return props

    def spread(r, props):
        if r.type == rules.PLACEMENT_GROUP:
            props["strategy"] = "spread"
        return props
    assert any("span availability zones" in m for m in rules.gpu_placement(_stack(prod, other_az)))
    assert any("cluster placement group" in m for m in rules.gpu_placement(_stack(dev, spread)))


def test_buckets_encrypted_and_private(prod):
    assert rules.buckets_encrypted(_stack(prod)) == [] and rules.buckets_private(_stack(prod)) == []

    def open_up(r, props):
        if r.type == rules.BUCKET_PAB:
            props["restrictPublicBuckets"] = False
        return props

    def drop_sse(r, props):
        if r.type == rules.BUCKET_SSE:
            props["bucket"] = "someone-else"
        return props
    assert rules.buckets_private(_stack(prod, open_up))
    assert rules.buckets_encrypted(_stack(prod, drop_sse))


def test_every_rule_passes_on_every_stack(cap):
    assert evaluate((r.type, r.name, r.inputs, r.outputs) for r in cap.registrations) == []


def test_pack_wraps_every_rule_with_its_enforcement_level(prod):
    pack = policies()
    assert [p.name for p in pack] == [r.name for r in rules.RULES]
    assert all(p.enforcement_level == EnforcementLevel.MANDATORY for p in pack)
    lt = _one(prod, rules.LAUNCH_TEMPLATE)
    bad = copy.deepcopy(lt.inputs)
    bad["metadataOptions"]["httpTokens"] = "optional"
    imds = next(p for p in pack if p.name == "imdsv2-required")
    reported: list[str] = []
    args = type("Args", (), {"resource_type": lt.type, "props": bad})()
    imds.validate(args, lambda message, urn=None: reported.append(message))
    assert reported and "IMDSv2" in reported[0]
