"""The Kubernetes pool's objects, as the real Pulumi program registers them under mocks (prod stack).

Kueue objects are validated against the v0.19.2 CRD schemas copied into tests/fixtures/schemas
(strictly: a field the schema does not declare fails, as the API server would silently prune it),
including the CRDs' CEL rules (`x-kubernetes-validations`, evaluated with cel-python; transition
rules that read `oldSelf` only apply to updates and are skipped); core kinds against the Kubernetes OpenAPI schemas that `kubernetes-validate` ships (offline).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from gpufleet.bom import load_bom, resolve_bom_path
from gpufleet.program.capture import Capture
from gpufleet.configure.nccl_env import nccl_env_for
from gpufleet.pool.kubernetes.monitoring_manifests import KUBE_PROMETHEUS_STACK
from gpufleet.pool.kubernetes import manifests as m
from gpufleet.pool.kubernetes import queues as q
from gpufleet.pool.kubernetes.nodes import desired_labels
from gpufleet.pool.kubernetes import versions as v
from gpufleet.pool.protocol import (BLOCK_LABEL, GATE_TAINT, PARTITION_LABEL, PENDING_TAINT_VALUE, QUARANTINE_TAINT,
                                    NodeState, PoolNode)

from .kueue_schema import KUEUE_GROUP, SCHEMAS, CelViolation, validate_kueue
from .kueue_schema import strict  # noqa: F401  (tests/ops/test_monitoring_k8s.py imports it from here)

CORE_KINDS = {"Namespace", "ConfigMap", "PersistentVolume", "PersistentVolumeClaim"}
# Where each chart takes the tolerations of the pods it runs (the charts' own values.yaml), and
# whether those pods must run before admission.
CHART_TOLERATIONS = {
    "kueue": ["controllerManager.tolerations"],
    "nvidia-device-plugin": ["tolerations"],
    "aws-efa-k8s-device-plugin": ["tolerations"],
    "dcgm-exporter": ["tolerations"],
    "aws-fsx-csi-driver": ["node.tolerations", "controller.tolerations"],
    "kube-prometheus-stack": ["prometheus-node-exporter.tolerations"],  # gpufleet.pool.kubernetes.monitoring_manifests
}


def k8s_objects(cap) -> list[dict[str, Any]]:
    """Every plain object the program registers (not Helm releases, manifests or patches)."""
    out = []
    for r in cap.registrations:
        if r.type.startswith("kubernetes:") and "kind" in r.inputs and "apiVersion" in r.inputs \
                and not r.type.startswith(("kubernetes:helm.sh", "kubernetes:yaml")) and not r.type.endswith("Patch"):
            out.append(r.inputs)
    return out


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def tolerates(tolerations: list[dict[str, Any]], key: str, value: str, effect: str) -> bool:
    """Kubernetes' toleration matching (core/v1 Toleration.ToleratesTaint)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != effect:
            continue
        if not t.get("key"):
            if t.get("operator") == "Exists":
                return True
            continue
        if t["key"] != key:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == value:
            return True
    return False


def gpu_quota(cq: dict[str, Any]) -> int:
    return next(r["nominalQuota"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
                for r in f["resources"] if r["name"] == m.GPU)


def dig(values: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        values = values[part]
    return values


@pytest.fixture(scope="module")
def prod(full_capture):
    return full_capture("prod")


@pytest.fixture(scope="module")
def objs(prod) -> list[dict[str, Any]]:
    """The pool's own objects (the monitoring component's are tests/ops/test_monitoring_k8s.py's)."""
    (monitoring,) = prod.of_type("gpufleet:ops:Monitoring")
    return k8s_objects(Capture(prod.stack, prod.spec, prod.plan,
                               [r for r in prod.registrations if r.parent != monitoring.urn], prod.outputs))


def test_every_kueue_object_is_valid_under_its_v0_19_2_crd(objs):
    kueue = [o for o in objs if o["apiVersion"].startswith(KUEUE_GROUP + "/")]
    assert {o["apiVersion"] for o in kueue} == {"kueue.x-k8s.io/v1beta2"}
    assert {o["kind"] for o in kueue} == {"Topology", "ResourceFlavor", "WorkloadPriorityClass", "Cohort",
                                          "ClusterQueue", "LocalQueue"}
    for obj in kueue:
        validate_kueue(obj)


def test_the_validator_refuses_what_the_api_server_would_refuse_or_prune(objs):
    cq = copy.deepcopy(of_kind(objs, "ClusterQueue")[0])
    del cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    with pytest.raises(jsonschema.ValidationError, match="nominalQuota"):
        validate_kueue(cq)
    typo = copy.deepcopy(of_kind(objs, "ResourceFlavor")[0])
    typo["spec"]["topology"] = typo["spec"].pop("topologyName")  # would be pruned: no TAS at all
    with pytest.raises(jsonschema.ValidationError, match="topology"):
        validate_kueue(typo)
    wpc = copy.deepcopy(of_kind(objs, "WorkloadPriorityClass")[0])
    wpc["value"] = "high"
    with pytest.raises(jsonschema.ValidationError):
        validate_kueue(wpc)


def test_the_crds_cel_rules_are_enforced(objs):
    topology = copy.deepcopy(of_kind(objs, "Topology")[0])
    topology["spec"]["levels"].reverse()  # hostname must be the lowest level
    with pytest.raises(CelViolation, match="kubernetes.io/hostname label can only be used at the lowest level"):
        validate_kueue(topology)
    flavor = copy.deepcopy(of_kind(objs, "ResourceFlavor")[0])
    flavor["spec"]["nodeLabels"] = {}
    with pytest.raises(CelViolation, match="at least one nodeLabel is required when topology is set"):
        validate_kueue(flavor)
    cq = copy.deepcopy(of_kind(objs, "ClusterQueue")[0])
    del cq["spec"]["cohortName"]
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 8
    with pytest.raises(CelViolation, match="borrowingLimit must be nil when cohort is empty"):
        validate_kueue(cq)
    cq = copy.deepcopy(of_kind(objs, "ClusterQueue")[0])
    cq["spec"]["preemption"]["reclaimWithinCohort"] = "Never"  # while borrowWithinCohort preempts: refused
    with pytest.raises(CelViolation):
        validate_kueue(cq)


def test_core_objects_are_valid_kubernetes_objects(prod, objs):
    version = prod.spec.pool.kubernetes_version
    core = [o for o in objs if o["kind"] in CORE_KINDS]
    assert {o["kind"] for o in core} == CORE_KINDS
    for obj in core:
        kubernetes_validate.validate(obj, version, strict=True)
    broken = copy.deepcopy(of_kind(objs, "PersistentVolume")[0])
    del broken["spec"]["csi"]["volumeHandle"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_each_partition_gets_its_quota_from_the_plan(prod, objs):
    """prod names no teams: one queue per partition, the operators', with the partition's whole quota."""
    plan = prod.plan
    unit_gpus = plan.topology.unit_gpus
    queues = {o["metadata"]["name"]: o for o in of_kind(objs, "ClusterQueue")}
    assert set(queues) == {p.name for p in plan.partitions}
    sku = prod.spec.cluster.instance
    for p in plan.partitions:
        (group,) = queues[p.name]["spec"]["resourceGroups"]
        own = group["flavors"][0]
        assert own["name"] == m.partition_flavor_name(p.name, sku.name)
        quota = {r["name"]: r["nominalQuota"] for r in own["resources"]}
        assert gpu_quota(queues[p.name]) == quota[m.GPU] == (p.quota_units if p.quota_units is not None else p.units) * unit_gpus
        assert set(group["coveredResources"]) == set(quota) == {"cpu", "memory", m.GPU, m.EFA}
        assert quota["cpu"] * sku.gpus >= quota[m.GPU] * sku.vcpus  # the node share per GPU, rounded up
        assert quota[m.EFA] == quota[m.GPU] * sku.efa_interfaces // sku.gpus
        for other in group["flavors"][1:]:  # the other partitions' blocks, borrowed only
            assert {r["name"]: r["nominalQuota"] for r in other["resources"]} == \
                {"cpu": 0, "memory": "0Gi", m.GPU: 0, m.EFA: 0}
    assert sum(gpu_quota(q) for q in queues.values()) <= plan.topology.units * unit_gpus


def test_prod_partitions_borrow_through_the_stacks_cohort_and_reclaim_by_preemption(prod, objs):
    assert prod.spec.pool.kueue_cohort_borrowing
    root = f"{prod.spec.cluster.name}-gpus"
    cohorts = {o["metadata"]["name"]: o["spec"] for o in of_kind(objs, "Cohort")}
    assert cohorts == {root: {}, **{f"gpufleet-{p.name}": {"parentName": root} for p in prod.plan.partitions}}
    flavors = {o["metadata"]["name"] for o in of_kind(objs, "ResourceFlavor")}
    for cq in of_kind(objs, "ClusterQueue"):
        assert cq["spec"]["cohortName"] == f"gpufleet-{cq['metadata']['name']}"
        assert cq["spec"]["preemption"] == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                                            "borrowWithinCohort": {"policy": "LowerPriority"}}
        assert {f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]} == flavors


def test_without_borrowing_a_queue_lists_only_its_own_partitions_blocks(prod):
    spec = prod.spec.model_copy(update={"pool": prod.spec.pool.model_copy(update={"kueue_cohort_borrowing": False})})
    layout = q.queue_layout(spec, prod.plan, spec.cluster.instance)
    names = [a.name for a in prod.plan.partitions]
    for queue in layout:
        cq = q.cluster_queue(queue, names, borrow_across=False)
        assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == \
            [m.partition_flavor_name(queue.partition, spec.cluster.instance_type)]
        assert "borrowWithinCohort" not in cq["spec"]["preemption"]
        validate_kueue(cq)
    for cohort in q.cohorts(names, parent=None):
        assert cohort["spec"] == {}
        validate_kueue(cohort)


def test_a_flavor_per_partition_ties_it_to_its_blocks(prod, objs):
    (topology,) = of_kind(objs, "Topology")
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [BLOCK_LABEL, "kubernetes.io/hostname"]
    flavors = {o["metadata"]["name"]: o for o in of_kind(objs, "ResourceFlavor")}
    assert len(flavors) == len(prod.plan.partitions)
    for p in prod.plan.partitions:
        flavor = flavors[m.partition_flavor_name(p.name, prod.plan.instance_type)]
        assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
        # the adapter labels a node with its plan partition at admission (pool/kubernetes/nodes.py)
        assert flavor["spec"]["nodeLabels"] == {m.INSTANCE_TYPE_LABEL: prod.plan.instance_type, PARTITION_LABEL: p.name}
        # the rollout admits a node with its block's partition (rollout/batch_stages.py), the adapter
        # writes it as this label: the flavor's nodes are the partition's blocks, and only those
        labelled = {b.id for b in prod.plan.blocks if desired_labels(PoolNode(
            slot="s", state=NodeState.ADMITTED, block=b.id, partition=b.partition))[PARTITION_LABEL] == p.name}
        assert labelled == set(p.blocks)


def test_local_queues_priorities_and_namespaces_per_partition(prod, objs):
    namespaces = {o["metadata"]["name"]: o for o in of_kind(objs, "Namespace")}
    queues = {o["metadata"]["name"]: o for o in of_kind(objs, "ClusterQueue")}
    for lq in of_kind(objs, "LocalQueue"):
        ns = lq["metadata"]["namespace"]
        assert ns in namespaces and lq["metadata"]["name"] == ns
        cq = queues[lq["spec"]["clusterQueue"]]
        assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    assert len(of_kind(objs, "LocalQueue")) == len(prod.plan.partitions)
    priorities = {o["metadata"]["name"]: o["value"] for o in of_kind(objs, "WorkloadPriorityClass")}
    # and the patrol's, one below the lowest (issue 22 item 6)
    assert priorities == {**{m.priority_class_name(p.name): p.priority for p in prod.plan.partitions},
                          q.PATROL_PRIORITY_CLASS: min(p.priority for p in prod.plan.partitions) - 1}
    assert set(namespaces) == {m.SYSTEM_NAMESPACE, *(p.name for p in prod.plan.partitions)}
    for p in prod.plan.partitions:
        labels = namespaces[p.name]["metadata"]["labels"]
        assert labels[q.KUEUE_MANAGED_LABEL] == "true" and labels[q.PRIORITY_NAMESPACE_LABEL] == m.priority_class_name(p.name)
        assert (q.MAX_EXEC_NAMESPACE_LABEL in labels) == (p.mode == "interactive")
    assert q.KUEUE_MANAGED_LABEL not in namespaces[m.SYSTEM_NAMESPACE]["metadata"]["labels"]


def test_nccl_environment_configmap_per_namespace_from_the_bom(prod, objs):
    env = nccl_env_for(load_bom(resolve_bom_path(prod.spec))).job_env
    maps = of_kind(objs, "ConfigMap")
    assert {c["metadata"]["namespace"] for c in maps} == {o["metadata"]["name"] for o in of_kind(objs, "Namespace")}
    for cm in maps:
        assert cm["metadata"]["name"] == m.nccl_configmap_name(prod.plan.instance_type)
        assert cm["data"] == env
        assert "FI_EFA_FORK_SAFE" not in cm["data"] and not any(k.startswith("RDMAV_") for k in cm["data"])


def test_fsx_volumes_are_bound_to_the_stacks_file_system(prod, objs):
    (fs,) = prod.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in of_kind(objs, "PersistentVolumeClaim")}
    pvs = of_kind(objs, "PersistentVolume")
    assert len(pvs) == len(claims) == len(of_kind(objs, "Namespace"))
    for pv in pvs:
        csi = pv["spec"]["csi"]
        assert csi["driver"] == "fsx.csi.aws.com" and csi["volumeHandle"] == fs.outputs["id"]
        assert csi["volumeAttributes"] == {"dnsname": fs.outputs["dnsName"], "mountname": fs.outputs["mountName"]}
        ref = pv["spec"]["claimRef"]
        claim = claims[(ref["namespace"], ref["name"])]
        assert claim["spec"]["volumeName"] == pv["metadata"]["name"]
        assert claim["spec"]["storageClassName"] == pv["spec"]["storageClassName"] == ""  # static, no provisioner


def test_charts_are_the_pinned_versions_and_kueue_matches_the_schemas(prod):
    releases = {r.inputs["name"]: r.inputs for r in prod.of_type("kubernetes:helm.sh/v3:Release")}
    assert {name: rel["version"] for name, rel in releases.items()} == \
        {c.release: c.version for c in (*v.CHARTS, KUBE_PROMETHEUS_STACK)}
    assert "kueue-v" + releases["kueue"]["version"] == SCHEMAS.name
    (mpi,) = prod.of_type("kubernetes:yaml/v2:ConfigFile")
    assert mpi.inputs["file"] == v.MPI_OPERATOR.url and f"/{v.MPI_OPERATOR.version}/" in v.MPI_OPERATOR.url


def test_everything_that_runs_before_admission_tolerates_the_gate_taint(prod):
    releases = {r.inputs["name"]: r.inputs for r in prod.of_type("kubernetes:helm.sh/v3:Release")}
    assert set(releases) == set(CHART_TOLERATIONS)
    for name, paths in CHART_TOLERATIONS.items():
        for path in paths:
            tolerations = dig(releases[name]["values"], path)
            assert tolerates(tolerations, GATE_TAINT, PENDING_TAINT_VALUE, "NoSchedule"), (name, path)
            assert tolerates(tolerations, QUARANTINE_TAINT, "xid-79", "NoExecute"), (name, path)
    (patch,) = prod.of_type("kubernetes:apps/v1:DeploymentPatch")
    assert patch.inputs["metadata"]["name"] == v.MPI_OPERATOR_DEPLOYMENT
    assert tolerates(patch.inputs["spec"]["template"]["spec"]["tolerations"], GATE_TAINT, PENDING_TAINT_VALUE,
                     "NoSchedule")
    assert not tolerates([{"key": "other", "operator": "Exists"}], GATE_TAINT, PENDING_TAINT_VALUE, "NoSchedule")


def test_the_nvidia_plugin_needs_no_node_feature_discovery_labels(prod):
    (rel,) = [r for r in prod.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "nvidia-device-plugin"]
    terms = rel.inputs["values"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": m.INSTANCE_TYPE_LABEL, "operator": "In", "values": [prod.plan.instance_type]}]}]


def test_kubernetes_objects_only_for_kubernetes_pools(full_capture):
    dev = full_capture("dev")
    assert dev.spec.pool.type != "kubernetes"
    assert not [r for r in dev.registrations if r.type.startswith(("kubernetes:", "gpufleet:pool:"))]


def test_reserved_namespace_names_are_refused(prod):
    from gpufleet.errors import ConfigError
    alloc = prod.plan.partitions[0].model_copy(update={"name": "kube-system"})
    with pytest.raises(ConfigError, match="reserved"):
        m.partition_queue(alloc, prod.plan.topology.unit_gpus, prod.spec.cluster.instance)
    plan = prod.plan.model_copy(update={"partitions": (alloc, *prod.plan.partitions[1:])})
    with pytest.raises(ConfigError, match="reserved"):
        q.queue_layout(prod.spec, plan, prod.spec.cluster.instance)


def test_every_kubernetes_object_goes_through_the_eks_components_provider(monkeypatch):
    """Not an ambient kubeconfig: the provider built from the cluster's own kubeconfig output."""
    from gpufleet.program import capture

    providers: dict[str, str] = {}
    register = capture.RecordingMonitor.RegisterResource

    def spy(self, request):
        if request.type.startswith("kubernetes:"):
            providers[request.name] = request.provider
        return register(self, request)
    monkeypatch.setattr(capture.RecordingMonitor, "RegisterResource", spy)
    capture.capture_program("prod", target_batch=1)
    assert len(providers) >= 30
    (provider,) = set(providers.values())
    assert "gpufleet:eks:Eks$pulumi:providers:kubernetes::" in provider
