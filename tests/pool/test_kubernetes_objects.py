"""The Kubernetes pool's objects, as the real Pulumi program registers them under mocks (prod stack).

Kueue objects are validated against the v0.19.2 CRD schemas copied into tests/fixtures/schemas
(strictly: a field the schema does not declare fails, as the API server would silently prune it),
including the CRDs' CEL rules (`x-kubernetes-validations`, evaluated with cel-python; transition
rules that read `oldSelf` only apply to updates and are skipped); core kinds against the Kubernetes OpenAPI schemas that `kubernetes-validate` ships (offline).
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpufleet.bom import load_bom, resolve_bom_path
from gpufleet.program.capture import Capture
from gpufleet.configure.nccl_env import nccl_env_for
from gpufleet.pool.kubernetes.monitoring_manifests import KUBE_PROMETHEUS_STACK
from gpufleet.pool.kubernetes import manifests as m
from gpufleet.pool.kubernetes import versions as v
from gpufleet.pool.protocol import BLOCK_LABEL, GATE_TAINT, PENDING_TAINT_VALUE, QUARANTINE_TAINT

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas" / "kueue-v0.19.2"
KUEUE_GROUP = "kueue.x-k8s.io"
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


@lru_cache(maxsize=None)
def crd_schema(kind: str, version: str) -> dict[str, Any]:
    for path in SCHEMAS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            served = {ver["name"]: ver for ver in crd["spec"]["versions"] if ver["served"]}
            assert version in served, f"{kind} {version} is not served by Kueue v0.19.2 (served: {sorted(served)})"
            return strict(served[version]["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no CRD for {kind} in {SCHEMAS}")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields refused wherever it lists properties (the API server prunes them)."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(out)
    return out


class CelViolation(AssertionError):
    pass


@lru_cache(maxsize=None)
def cel_program(rule: str):
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_violations(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Every CEL rule of the schema, evaluated where the object has a value, as the API server does on create."""
    out = []
    for check in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in check["rule"]:
            continue
        result = cel_program(check["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            out.append(f"{path or '<root>'}: {check.get('message', check['rule'])}")
    if isinstance(value, dict):
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            sub_schema = schema.get("properties", {}).get(key, extra if isinstance(extra, dict) else None)
            if sub_schema is not None:
                out += cel_violations(sub_schema, sub, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, sub in enumerate(value):
            out += cel_violations(schema["items"], sub, f"{path}[{i}]")
    return out


def validate_kueue(obj: dict[str, Any]) -> None:
    group, version = obj["apiVersion"].split("/")
    assert group == KUEUE_GROUP
    schema = crd_schema(obj["kind"], version)
    jsonschema.Draft7Validator(schema).validate(obj)
    violations = cel_violations(schema, obj)
    if violations:
        raise CelViolation("; ".join(violations))


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
    assert {o["kind"] for o in kueue} == {"Topology", "ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue",
                                          "LocalQueue"}
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
    plan = prod.plan
    unit_gpus = plan.topology.unit_gpus
    queues = {o["metadata"]["name"]: o for o in of_kind(objs, "ClusterQueue")}
    assert set(queues) == {p.name for p in plan.partitions}
    for p in plan.partitions:
        (group,) = queues[p.name]["spec"]["resourceGroups"]
        (flavor,) = group["flavors"]
        quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        assert gpu_quota(queues[p.name]) == quota[m.GPU] == (p.quota_units if p.quota_units is not None else p.units) * unit_gpus
        assert set(group["coveredResources"]) == set(quota) == {"cpu", "memory", m.GPU, m.EFA}
        sku = prod.spec.cluster.instance
        assert quota["cpu"] * sku.gpus >= quota[m.GPU] * sku.vcpus  # the node share per GPU, rounded up
        assert quota[m.EFA] == quota[m.GPU] * sku.efa_interfaces // sku.gpus
    assert sum(gpu_quota(q) for q in queues.values()) <= plan.topology.units * unit_gpus


def test_prod_queues_borrow_in_one_cohort_and_reclaim_by_preemption(prod, objs):
    assert prod.spec.pool.kueue_cohort_borrowing
    cohorts = {o["spec"].get("cohortName") for o in of_kind(objs, "ClusterQueue")}
    assert cohorts == {f"{prod.spec.cluster.name}-gpus"}
    for cq in of_kind(objs, "ClusterQueue"):
        assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"


def test_without_borrowing_a_queue_has_no_cohort_and_stays_valid(prod):
    queue = m.partition_queues(prod.plan, prod.spec.cluster.instance)[0]
    cq = m.cluster_queue(queue, prod.plan.instance_type, cohort=None)
    assert "cohortName" not in cq["spec"]
    validate_kueue(cq)


def test_one_flavor_placed_by_block_topology(prod, objs):
    (topology,) = of_kind(objs, "Topology")
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [BLOCK_LABEL, "kubernetes.io/hostname"]
    (flavor,) = of_kind(objs, "ResourceFlavor")
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    assert flavor["spec"]["nodeLabels"] == {m.INSTANCE_TYPE_LABEL: prod.plan.instance_type}
    for cq in of_kind(objs, "ClusterQueue"):
        assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == [flavor["metadata"]["name"]]


def test_local_queues_priorities_and_namespaces_per_partition(prod, objs):
    namespaces = {o["metadata"]["name"] for o in of_kind(objs, "Namespace")}
    queues = {o["metadata"]["name"]: o for o in of_kind(objs, "ClusterQueue")}
    for lq in of_kind(objs, "LocalQueue"):
        ns = lq["metadata"]["namespace"]
        assert ns in namespaces
        cq = queues[lq["spec"]["clusterQueue"]]
        assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    assert len(of_kind(objs, "LocalQueue")) == len(prod.plan.partitions)
    priorities = {o["metadata"]["name"]: o["value"] for o in of_kind(objs, "WorkloadPriorityClass")}
    assert priorities == {m.priority_class_name(p.name): p.priority for p in prod.plan.partitions}
    assert namespaces == {m.SYSTEM_NAMESPACE, *(p.name for p in prod.plan.partitions)}


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
