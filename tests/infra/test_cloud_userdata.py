"""User data as a node would read it: MIME parts, a NodeConfig valid against nodeadm's CRD."""

from __future__ import annotations

import email

import jsonschema
import yaml

from gpufleet.cloud.userdata import GATE_TAINT, NODEADM_CONTENT_TYPE

INSTANCE = "aws:ec2/instance:Instance"


def _gpu_nodes(cap):
    """The GPU node instances (the Slurm head and the storage clients are instances too)."""
    return [i for i in cap.of_type(INSTANCE) if i.inputs["tags"]["gpufleet.io/role"] == "gpu-node"]


def _parts(user_data: str) -> dict[str, str]:
    msg = email.message_from_string(user_data)
    assert msg.is_multipart() and msg.get_content_type() == "multipart/mixed"
    return {p.get_content_type(): p.get_payload() for p in msg.get_payload()}


def _flags(flags: list[str]) -> dict[str, str]:
    return dict(f.removeprefix("--").split("=", 1) for f in flags)


def test_eks_nodes_register_tainted_with_their_slot_labels(full_capture, nodeadm_schema):
    for stack in ("prod", "inference"):
        cap = full_capture(stack)
        cluster, = cap.of_type("aws:eks/cluster:Cluster")
        for inst in _gpu_nodes(cap)[:: 31]:
            parts = _parts(inst.inputs["userData"])
            config = yaml.safe_load(parts[NODEADM_CONTENT_TYPE])
            jsonschema.validate(config, nodeadm_schema)
            assert config["apiVersion"] == "node.eks.aws/v1alpha1" and config["kind"] == "NodeConfig"
            c = config["spec"]["cluster"]
            assert (c["name"], c["apiServerEndpoint"]) == (cluster.inputs["name"], cluster.outputs["endpoint"])
            assert c["certificateAuthority"] == cluster.outputs["certificateAuthority"]["data"] and c["cidr"]
            flags = _flags(config["spec"]["kubelet"]["flags"])
            assert flags["register-with-taints"] == GATE_TAINT
            labels = dict(kv.split("=") for kv in flags["node-labels"].split(","))
            tags = inst.inputs["tags"]
            assert labels == {"gpufleet.io/batch": tags["gpufleet.io/batch"], "gpufleet.io/block": tags["gpufleet.io/block"],
                              "gpufleet.io/stack": stack, "gpufleet.io/slot": inst.name}


def test_slurm_and_sim_nodes_get_a_shell_part_and_no_nodeconfig(full_capture):
    for stack in ("dev", "local"):
        inst = next(i for i in full_capture(stack).of_type(INSTANCE) if i.inputs["tags"]["gpufleet.io/role"] == "gpu-node")
        parts = _parts(inst.inputs["userData"])
        assert list(parts) == ["text/x-shellscript"]
        assert f"hostnamectl set-hostname {inst.name}" in parts["text/x-shellscript"]


def test_a_broken_nodeconfig_fails_the_schema(full_capture, nodeadm_schema):
    inst = _gpu_nodes(full_capture("prod"))[0]
    config = yaml.safe_load(_parts(inst.inputs["userData"])[NODEADM_CONTENT_TYPE])
    config["spec"]["kubelet"]["flags"] = "--register-with-taints=x"  # a string where the CRD wants a list
    try:
        jsonschema.validate(config, nodeadm_schema)
    except jsonschema.ValidationError:
        return
    raise AssertionError("the CRD schema accepted kubelet.flags as a string")
