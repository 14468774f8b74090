"""An admission guard that makes Kueue hand out GPUs in whole units, generated from the plan.

Why a ValidatingAdmissionPolicy on Kueue `Workload` objects: Kueue's topology-aware scheduling
packs a workload into a block only when the workload asks for it, and its quota counts GPUs, not
units, so nothing in Kueue stops a job from taking 7 GPUs of a 10-GPU unit (the rest of that unit
is then useless to a unit-sized job) or from scattering its pods over blocks. Every job kind
(Job, JobSet, MPIJob, PyTorchJob...) becomes a Workload in its namespace, so one policy on
Workloads guards them all. The policy refuses, in the partition namespaces, a Workload:
- whose pods ask for a number of `nvidia.com/gpu` that does not divide a node's GPUs (such a pod
  spans nodes, or leaves a fragment of a node no whole unit can use);
- whose GPUs in total (count x per-pod GPUs, over its podSets) are not a whole number of units;
- of more than one GPU pod without a block-level topology request: `topologyRequest.required`
  = the block label while it fits in one block, or, for more than a block,
  `podSetSliceRequiredTopology` = the block label with slices of whole units (each unit then
  stays inside one block); several GPU podSets inside one block share a `podSetGroupName` so
  Kueue places them in the same block.
Kueue fills `topologyRequest` from the pod template annotations (`kueue.x-k8s.io/podset-*`),
which is what the messages tell users to set.
One shape outside whole units is admitted: the patrol's hold (`patrol_job`), a Workload at the
WorkloadPriorityClass `gpufleet-patrol` (`spec.priorityClassRef`) of exactly one pod asking for
exactly a node's GPUs. It is the lowest priority, so it never keeps a fragment of a unit from a
real job: Kueue preempts it. Any other shape at that class is judged like every workload, and the
submission policy lets only the operators' namespaces (no team's) name that class.

Only CREATE is checked: a Workload's podSets are immutable, and refusing a later UPDATE (a
finalizer removed by Kueue) would only wedge a Workload that existed before the policy.
The CEL is plain CEL plus `sum()` from the Kubernetes CEL list library (CEL itself has no fold);
`tests/pool/test_kueue_unit_policy.py` evaluates these exact expressions.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from gpufleet.plan.model import Topology
from gpufleet.pool.kubernetes.manifests import GPU, MANAGED_BY
from gpufleet.pool.kubernetes.queues import PATROL_PRIORITY_CLASS
from gpufleet.pool.protocol import BLOCK_LABEL

POLICY = "gpufleet-whole-units"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
SLICE_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"


def lit(text: str) -> str:
    """A CEL string literal (a JSON string is one: same quotes and escapes)."""
    return json.dumps(text)


def container_gpus(c: str) -> str:
    """GPUs one container asks for: its request, else its limit (Kueue and the scheduler default a
    missing request to the limit). Values are int-or-string quantities; GPUs are whole numbers."""
    def amount(kind: str) -> str:
        return f"has({c}.resources) && has({c}.resources.{kind}) && {lit(GPU)} in {c}.resources.{kind}"
    return (f"({amount('requests')} ? int(string({c}.resources.requests[{lit(GPU)}])) : "
            f"({amount('limits')} ? int(string({c}.resources.limits[{lit(GPU)}])) : 0))")


def pod_gpus(p: str) -> str:
    """GPUs one pod of podSet `p` asks for: the sum over its containers."""
    return f"{p}.template.spec.containers.map(c, {container_gpus('c')}).sum()"


def unit_shape(t: Topology) -> str:
    """The plan's unit in words, for the messages users read."""
    n = t.gpus_per_node
    if t.unit_gpus % n == 0:
        shape = f"{t.unit_gpus // n} node(s) x {n} GPUs"
    elif n % t.unit_gpus == 0:
        shape = f"{t.unit_gpus} of a node's {n} GPUs"
    else:
        shape = f"on nodes of {n} GPUs, sharing nodes"
    return (f"units of {t.unit_gpus} GPUs ({shape}); a block is {t.units_per_block} units = "
            f"{t.nodes_per_block} nodes x {n} GPUs = {t.block_gpus} GPUs")


def patrol_hold(node_gpus: int) -> str:
    """The patrol's hold: its class, one podSet of one pod, that pod asking for a whole node's GPUs."""
    ref = "object.spec.priorityClassRef"
    return (f"has({ref}) && {ref}.group == {lit('kueue.x-k8s.io')} && {ref}.kind == {lit('WorkloadPriorityClass')} && "
            f"{ref}.name == {lit(PATROL_PRIORITY_CLASS)} && size(object.spec.podSets) == 1 && "
            f"object.spec.podSets[0].count == 1 && {pod_gpus('object.spec.podSets[0]')} == {node_gpus}")


def variables(node_gpus: int | None = None) -> list[dict[str, str]]:
    """Evaluated in order; later ones and the validations read them as `variables.<name>`."""
    gpu_sets = "variables.gpuPodSets"
    out = [
        {"name": "gpuPodSets", "expression": f"object.spec.podSets.filter(p, {pod_gpus('p')} > 0)"},
        {"name": "totalGpus", "expression": f"{gpu_sets}.map(p, p.count * {pod_gpus('p')}).sum()"},
        {"name": "gpuPods", "expression": f"{gpu_sets}.map(p, p.count).sum()"},
    ]
    if node_gpus is not None:
        out.append({"name": "patrolHold", "expression": patrol_hold(node_gpus)})
    return out


def message(*parts: str) -> str:
    """A messageExpression: plain text parts become literals, `=`-prefixed parts are CEL (ints in string())."""
    return " + ".join(f"string({p[1:]})" if p.startswith("=") else lit(p) for p in parts)


def validations(t: Topology) -> list[dict[str, str]]:
    unit, node, block = t.unit_gpus, t.gpus_per_node, t.block_gpus
    shape = f" ({unit_shape(t)})"
    blk = lit(BLOCK_LABEL)
    sets = "variables.gpuPodSets"
    req = "p.topologyRequest"
    required_block = f"has({req}) && has({req}.required) && {req}.required == {blk}"
    sliced_block = f"has({req}) && has({req}.podSetSliceRequiredTopology) && {req}.podSetSliceRequiredTopology == {blk}"
    slice_gpus = f"{req}.podSetSliceSize * {pod_gpus('p')}"
    bad_pod = f"{sets}.filter(p, {node} % {pod_gpus('p')} != 0)[0]"
    first = f"{sets}[0].topologyRequest"
    slices = f"{SLICE_ANNOTATION}: {BLOCK_LABEL} with {SLICE_SIZE_ANNOTATION}: the pods of a whole number of units"
    return [
        {"expression": "object.spec.podSets.all(p, !has(p.template.spec.initContainers) || "
                       f"p.template.spec.initContainers.all(c, {container_gpus('c')} == 0))",
         "message": f"ask for {GPU} in a pod's containers, not in its init containers: gpufleet counts a pod's "
                    f"GPUs to keep workloads in whole units{shape}",
         "reason": "Forbidden"},
        {"expression": f"{sets}.all(p, {node} % {pod_gpus('p')} == 0)",
         "messageExpression": f"{lit('podSet ')} + {bad_pod}.name + " + message(
             " asks for ", f"={pod_gpus(bad_pod)}",
             f" GPUs per pod; a pod here takes a number of GPUs that divides the {node} of a node, so that it stays "
             f"on one node and leaves no fragment a unit cannot use{shape}"),
         "reason": "Forbidden"},
        {"expression": f"variables.totalGpus % {unit} == 0",
         "messageExpression": message(
             "this workload asks for ", "=variables.totalGpus",
             f" GPUs in all; GPUs are handed out in whole units of {unit}, so ask for a multiple of {unit}, e.g. ",
             f"=(variables.totalGpus / {unit} + 1) * {unit}", shape),
         "reason": "Forbidden"},
        {"expression": f"variables.gpuPods <= 1 || {sets}.all(p, ({required_block}) || ({sliced_block}))",
         "messageExpression": message(
             "this workload runs ", "=variables.gpuPods",
             f" GPU pods, so every GPU pod template must be placed by block: annotate it with {REQUIRED_ANNOTATION}: "
             f"{BLOCK_LABEL} (up to one block, {block} GPUs) or, for more, {slices}{shape}"),
         "reason": "Forbidden"},
        {"expression": f"variables.totalGpus <= {block} || {sets}.all(p, !({required_block}))",
         "messageExpression": message(
             "this workload asks for ", "=variables.totalGpus",
             f" GPUs, more than one block of {block}, so it can never be placed inside one block: instead of "
             f"{REQUIRED_ANNOTATION}, use {slices}{shape}"),
         "reason": "Forbidden"},
        {"expression": f"{sets}.all(p, !({sliced_block}) || (has({req}.podSetSliceSize) && "
                       f"p.count % {req}.podSetSliceSize == 0 && {slice_gpus} % {unit} == 0 && "
                       f"{slice_gpus} <= {block}))",
         "message": f"each slice placed by {SLICE_ANNOTATION}: {BLOCK_LABEL} must be a whole number of units that "
                    f"fits in a block, and its podSet a whole number of slices: set {SLICE_SIZE_ANNOTATION} so that "
                    f"pods x GPUs per pod is a multiple of {unit} GPUs, at most {block}{shape}",
         "reason": "Forbidden"},
        {"expression": f"size({sets}) <= 1 || variables.totalGpus > {block} || "
                       f"(has({first}) && has({first}.podSetGroupName) && "
                       f"{sets}.all(p, has({req}) && has({req}.podSetGroupName) && "
                       f"{req}.podSetGroupName == {first}.podSetGroupName))",
         "message": f"a workload whose GPUs sit in several podSets inside one block must keep them together: "
                    f"annotate every GPU pod template with the same {GROUP_ANNOTATION}{shape}",
         "reason": "Forbidden"},
    ]


def patrol_admitted(rules: list[dict[str, str]]) -> list[dict[str, str]]:
    """Every whole-unit rule also passes the patrol's hold; the first (no GPUs in init containers) holds
    for it too, since the hold's shape is counted over its containers alone."""
    init, *rest = rules
    return [init, *({**v, "expression": f"variables.patrolHold || ({v['expression']})"} for v in rest)]


def whole_unit_policy(t: Topology, partitions: Sequence[str]) -> list[dict[str, Any]]:
    """The policy and its binding to the partition namespaces (the gpufleet-system namespace, where
    the gates' MPIJobs run on whole nodes, is not bound)."""
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": POLICY, "labels": dict(MANAGED_BY)},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {
                           "matchPolicy": "Equivalent",  # a v1beta1 request is converted to v1beta2 first
                           "resourceRules": [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["v1beta2"],
                                              "operations": ["CREATE"], "resources": ["workloads"]}]},
                       "variables": variables(t.gpus_per_node),
                       "validations": patrol_admitted(validations(t))}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": POLICY, "labels": dict(MANAGED_BY)},
               "spec": {"policyName": POLICY, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchExpressions": [
                            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(partitions)}]}}}}
    return [policy, binding]
