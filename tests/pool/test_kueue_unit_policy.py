"""The whole-unit admission policy on Kueue Workloads: its exact CEL, evaluated with cel-python the way
the API server evaluates a ValidatingAdmissionPolicy on CREATE (tests/pool/admission_cel.py), against Workloads built to
Kueue's v1beta2 Workload API; and the objects the Pulumi program registers, under mocks.

A pod template is checked against the Kubernetes OpenAPI schema (kubernetes-validate);
the rest of a Workload follows Kueue's v1beta2 types (`PodSet.count`, `PodSet.template`,
`PodSet.topologyRequest.{required, podSetSliceRequiredTopology, podSetSliceSize, podSetGroupName}`).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gpufleet.plan.topology import build_topology
from gpufleet.pool.kubernetes import unit_policy as up
from gpufleet.pool.kubernetes.manifests import GPU, SYSTEM_NAMESPACE
from gpufleet.pool.protocol import BLOCK_LABEL

from .admission_cel import admit

K8S_VERSION = "1.33"
SHARED = build_topology("t", 1000, 10, 8, 0.0)[0]  # the seed: 10-GPU units on 8-GPU nodes, 5-node blocks
ALIGNED = build_topology("t", 1024, 16, 8, 0.0)[0]  # 2-node units
ONE_NODE = build_topology("t", 1024, 8, 8, 0.0)[0]  # a unit is a node


def create(policy: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    """Creating `workload`: the messages of the failed validations ([]: admitted)."""
    return admit(policy, workload)


def pod_set(name: str, count: int, gpus: int | str | None, *, limits_only: bool = False, required: str | None = None,
            slice_level: str | None = None, slice_size: int | None = None, group: str | None = None,
            init_gpus: int | None = None, sidecar_gpus: int | None = None) -> dict[str, Any]:
    """A Kueue v1beta2 PodSet as Kueue writes it from a job's pod template and its annotations."""
    def container(cname: str, amount: int | str | None) -> dict[str, Any]:
        c: dict[str, Any] = {"name": cname, "image": "registry.example/train:1.0"}
        if amount is not None:
            c["resources"] = {"limits": {GPU: amount}} if limits_only else \
                {"requests": {GPU: amount, "cpu": "8"}, "limits": {GPU: amount}}
        return c
    spec: dict[str, Any] = {"containers": [container("train", gpus)], "restartPolicy": "Never"}
    if sidecar_gpus is not None:
        spec["containers"].append(container("sidecar", sidecar_gpus))
    if init_gpus is not None:
        spec["initContainers"] = [container("warmup", init_gpus)]
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
                                  "template": template}, K8S_VERSION, strict=True)
    ps: dict[str, Any] = {"name": name, "count": count, "template": template}
    request = {k: v for k, v in (("required", required), ("podSetSliceRequiredTopology", slice_level),
                                 ("podSetSliceSize", slice_size), ("podSetGroupName", group)) if v is not None}
    if request:
        ps["topologyRequest"] = request
    return ps


def workload(*pod_sets: dict[str, Any], namespace: str = "train") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "job-llm-7c2f1", "namespace": namespace},
            "spec": {"queueName": namespace, "podSets": list(pod_sets)}}


@pytest.fixture(scope="module")
def shared():
    return up.whole_unit_policy(SHARED, ["train", "debug"])[0]


@pytest.fixture(scope="module")
def aligned():
    return up.whole_unit_policy(ALIGNED, ["train"])[0]


def test_the_plans_shapes_are_what_the_tests_assume():
    assert (SHARED.unit_gpus, SHARED.gpus_per_node, SHARED.nodes_per_block, SHARED.block_gpus) == (10, 8, 5, 40)
    assert (ALIGNED.unit_gpus, ALIGNED.gpus_per_node, ALIGNED.block_gpus) == (16, 8, ALIGNED.nodes_per_block * 8)


@pytest.mark.parametrize("wl", [
    workload(pod_set("main", 5, 2, required=BLOCK_LABEL)),  # one unit in 2-GPU pods
    workload(pod_set("main", 5, "2", required=BLOCK_LABEL)),  # a quantity string is the same request
    workload(pod_set("main", 5, 8, limits_only=True, required=BLOCK_LABEL)),  # a whole block; limits only
    workload(pod_set("workers", 10, 8, slice_level=BLOCK_LABEL, slice_size=5)),  # two blocks, a block per slice
    workload(pod_set("workers", 20, 2, required=BLOCK_LABEL)),  # 4 units = one block
    workload(pod_set("launcher", 1, None), pod_set("worker", 5, 2, required=BLOCK_LABEL)),  # an MPIJob
    workload(pod_set("master", 1, 2, required=BLOCK_LABEL, group="g"),
             pod_set("worker", 4, 2, required=BLOCK_LABEL, group="g")),  # a PyTorchJob kept together
    workload(pod_set("main", 5, 1, sidecar_gpus=1, required=BLOCK_LABEL)),  # GPUs in two containers
    workload(pod_set("cpu", 3, None)),  # no GPUs: not the policy's business
])
def test_whole_units_placed_by_block_are_admitted(shared, wl):
    assert create(shared, wl) == []


def test_a_pod_that_does_not_divide_a_node_is_refused_naming_the_shape(shared):
    msgs = create(shared, workload(pod_set("main", 10, 3, required=BLOCK_LABEL)))
    assert msgs[0] == ("podSet main asks for 3 GPUs per pod; a pod here takes a number of GPUs that divides the 8 of "
                       "a node, so that it stays on one node and leaves no fragment a unit cannot use (units of 10 "
                       "GPUs (on nodes of 8 GPUs, sharing nodes); a block is 4 units = 5 nodes x 8 GPUs = 40 GPUs)")
    assert len(msgs) == 1  # 30 GPUs are three whole units: only the pod size is wrong
    assert create(shared, workload(pod_set("main", 1, 16)))[0].startswith("podSet main asks for 16 GPUs per pod")


def test_a_partial_unit_is_refused_with_the_next_whole_number(shared, aligned):
    (msg,) = create(shared, workload(pod_set("main", 3, 4, required=BLOCK_LABEL)))
    assert msg.startswith("this workload asks for 12 GPUs in all; GPUs are handed out in whole units of 10, so ask "
                          "for a multiple of 10, e.g. 20 (units of 10 GPUs")
    (msg,) = create(aligned, workload(pod_set("main", 1, 8)))
    assert "asks for 8 GPUs in all" in msg and "e.g. 16" in msg and "2 node(s) x 8 GPUs" in msg
    assert create(aligned, workload(pod_set("main", 2, 8, required=BLOCK_LABEL))) == []


def test_several_gpu_pods_need_a_block_topology_request(shared, aligned):
    (msg,) = create(shared, workload(pod_set("main", 5, 2)))
    assert msg.startswith("this workload runs 5 GPU pods, so every GPU pod template must be placed by block: annotate "
                          f"it with kueue.x-k8s.io/podset-required-topology: {BLOCK_LABEL} (up to one block, 40 GPUs)")
    assert create(shared, workload(pod_set("main", 5, 2, required="kubernetes.io/hostname")))  # not the block level
    one_node = up.whole_unit_policy(ONE_NODE, ["train"])[0]
    assert create(one_node, workload(pod_set("main", 1, 4, sidecar_gpus=4))) == []  # one pod: one node, no request
    assert create(one_node, workload(pod_set("main", 2, 4)))  # two pods may land on two nodes


def test_more_than_a_block_cannot_be_required_in_one_block(shared):
    (msg,) = create(shared, workload(pod_set("main", 10, 8, required=BLOCK_LABEL)))
    assert msg.startswith("this workload asks for 80 GPUs, more than one block of 40, so it can never be placed "
                          "inside one block: instead of kueue.x-k8s.io/podset-required-topology, use "
                          f"kueue.x-k8s.io/podset-slice-required-topology: {BLOCK_LABEL}")


@pytest.mark.parametrize("count, gpus, size", [
    (15, 8, 3),  # a slice of 24 GPUs: not whole units
    (20, 2, 15),  # 30-GPU slices, but 20 pods are not whole slices
    (20, 8, 10),  # an 80-GPU slice does not fit in a 40-GPU block
])
def test_slices_must_be_whole_units_inside_a_block(shared, count, gpus, size):
    msgs = create(shared, workload(pod_set("main", count, gpus, slice_level=BLOCK_LABEL, slice_size=size)))
    assert [m for m in msgs if m.startswith("each slice placed by kueue.x-k8s.io/podset-slice-required-topology")]
    assert create(shared, workload(pod_set("main", 20, 8, slice_level=BLOCK_LABEL, slice_size=5))) == []


def test_gpu_pod_sets_in_one_block_must_share_a_group(shared):
    ungrouped = workload(pod_set("master", 1, 2, required=BLOCK_LABEL), pod_set("worker", 4, 2, required=BLOCK_LABEL))
    (msg,) = create(shared, ungrouped)
    assert "the same kueue.x-k8s.io/podset-group-name" in msg
    split = workload(pod_set("master", 1, 2, required=BLOCK_LABEL, group="a"),
                     pod_set("worker", 4, 2, required=BLOCK_LABEL, group="b"))
    assert create(shared, split) == [msg]


def test_gpus_in_init_containers_are_refused(shared):
    msgs = create(shared, workload(pod_set("main", 5, 2, init_gpus=8, required=BLOCK_LABEL)))
    assert msgs == [f"ask for {GPU} in a pod's containers, not in its init containers: gpufleet counts a pod's GPUs "
                    f"to keep workloads in whole units ({up.unit_shape(SHARED)})"]


def test_the_binding_covers_the_partition_namespaces_only():
    policy, binding = up.whole_unit_policy(SHARED, ["train", "debug"])
    rule, = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (["kueue.x-k8s.io"], ["workloads"], ["CREATE"])
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == ["Deny"]
    (expr,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]

    def selected(ns: str) -> bool:  # what the API server does with a namespace's automatic name label
        return {up.NAMESPACE_NAME_LABEL: ns}.get(expr["key"]) in expr["values"] and expr["operator"] == "In"
    assert selected("train") and selected("debug") and not selected(SYSTEM_NAMESPACE) and not selected("default")
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_program_registers_the_policy_for_the_plans_unit_and_partitions(full_capture):
    prod = full_capture("prod")
    (pol,) = [r for r in prod.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
              if r.inputs["metadata"]["name"] == up.POLICY]
    (bind,) = [r for r in prod.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
               if r.inputs["metadata"]["name"] == up.POLICY]
    want_policy, want_binding = up.whole_unit_policy(prod.plan.topology, [p.name for p in prod.plan.partitions])
    assert pol.inputs["spec"] == want_policy["spec"] and bind.inputs["spec"] == want_binding["spec"]
    assert pol.inputs["metadata"]["name"] == up.POLICY
    (expr,) = bind.inputs["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert set(expr["values"]) == {p.name for p in prod.plan.partitions}
    kubernetes_validate.validate({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                                  **{k: pol.inputs[k] for k in ("metadata", "spec")}},
                                 prod.spec.pool.kubernetes_version, strict=True)
    (component,) = prod.of_type("gpufleet:pool:WholeUnits")
    assert pol.parent == bind.parent == component.urn
    unit = prod.plan.topology.unit_gpus
    assert create(pol.inputs, workload(pod_set("main", 1, 7)))[0].startswith("podSet main asks for 7 GPUs per pod")
    assert f"whole units of {unit}" in create(pol.inputs, workload(pod_set("main", 1, 1)))[0]
