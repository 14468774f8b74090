"""Kueue enforcement on a Kubernetes pool (issue 20 item 2), as the real Pulumi program registers it
under mocks for the prod and inference stacks with teams (`gpufleet:ops.tenants`) added:
- every Kueue object against the v0.19.2 CRD schemas and their CEL rules (tests/pool/kueue_schema.py),
  every core, RBAC and admission object against the Kubernetes OpenAPI schemas (kubernetes-validate);
- per-team ClusterQueues with the stack's shares in the partition's cohort, a flavor per partition;
- the submission policy's exact CEL on Jobs in a queue namespace (tests/pool/admission_cel.py): an
  unlabelled Job, another team's queue, the wrong priority class, debug's run-time limit;
- RBAC as the API server's RBAC authorizer reads Roles and RoleBindings (namespace, group, apiGroup,
  resource, verb): a team acts only on its own queue's Jobs;
- the documented unit jobs of the three seed modes (pool/kubernetes/unit_jobs.py) pass both
  admission policies, the Job as submitted and the Workload Kueue makes of it, and name priority
  classes and LocalQueues the program creates; the system namespace's jobs stay outside Kueue.
"""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from gpufleet.errors import ConfigError
from gpufleet.program.capture import Capture, capture_program
from gpufleet.pool.kubernetes import chart_values, queues as q, unit_jobs as uj
from gpufleet.pool.kubernetes.manifests import GPU, SYSTEM_NAMESPACE, namespace as plain_namespace
from gpufleet.pool.kubernetes.submission_policy import POLICY, submission_policy
from gpufleet.pool.kubernetes.team_access import team_group
from gpufleet.pool.kubernetes.unit_policy import whole_unit_policy
from gpufleet.spec import Tenant, load_stack

from .admission_cel import admit
from .kueue_schema import KUEUE_GROUP, validate_kueue

IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/train@sha256:" + "a" * 64
TENANTS = {
    "prod": [{"name": "vision", "partitions": ["train", "debug"], "quotaUnits": {"train": 50}},
             {"name": "lang", "partitions": ["train", "sim", "debug"]}],
    "inference": [{"name": "serve", "partitions": ["prefill", "decode"]}],
}
CORE_GROUPS = ("v1", "rbac.authorization.k8s.io/v1", "admissionregistration.k8s.io/v1")


def with_teams(stack: str):
    spec = load_stack(stack)
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["ops"] = {**raw.get("ops", {}), "tenants": TENANTS[stack]}
    return type(spec).from_raw(raw, source=f"tests: stack {stack} with teams")


_captures: dict[str, Capture] = {}


def captured(stack: str) -> Capture:
    """The program's registrations for the stack with teams (first batch: the pool objects are all there)."""
    if stack not in _captures:
        _captures[stack] = capture_program(with_teams(stack), stack=stack, target_batch=1)
    return _captures[stack]


@pytest.fixture(scope="module", params=["prod", "inference"])
def teams(request) -> Capture:
    return captured(request.param)


@pytest.fixture(scope="module")
def prod_teams() -> Capture:
    return captured("prod")


def objects(cap: Capture) -> list[dict[str, Any]]:
    """Every plain object the program registers (typed or custom), not Helm releases or manifests."""
    out = []
    for r in cap.registrations:
        if r.type.startswith(("kubernetes:helm.sh", "kubernetes:yaml")) or r.type.endswith("Patch"):
            continue
        if r.type.startswith("kubernetes:") and "metadata" in r.inputs:
            api, kind = r.type.removeprefix("kubernetes:").rsplit(":", 1)
            api = api.removeprefix("core/")
            out.append({"apiVersion": api, "kind": kind, **{k: v for k, v in r.inputs.items()
                                                              if k not in ("apiVersion", "kind")}})
    return out


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in of_kind(objs, kind)}


def live_namespace(ns: dict[str, Any]) -> dict[str, Any]:
    """A namespace as the API server stores it: with the `kubernetes.io/metadata.name` label it adds."""
    out = copy.deepcopy(ns)
    out["metadata"].setdefault("labels", {})[q.NAMESPACE_NAME_LABEL] = out["metadata"]["name"]
    return out


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector's matchLabels (the only form gpufleet's selectors use) against an object's labels."""
    assert set(selector) == {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def workload_of(job: dict[str, Any]) -> dict[str, Any]:
    """The Workload Kueue v0.19.2 makes of a batch/v1 Job (pkg/controller/jobs/job/job_controller.go
    `PodSets`: one podSet "main", count min(parallelism, completions), the Job's pod template, and
    with TAS the topology request from the template's `kueue.x-k8s.io/podset-*` annotations)."""
    spec = job["spec"]
    ann = spec["template"].get("metadata", {}).get("annotations", {})
    request = {}
    if "kueue.x-k8s.io/podset-required-topology" in ann:
        request["required"] = ann["kueue.x-k8s.io/podset-required-topology"]
    if "kueue.x-k8s.io/podset-slice-required-topology" in ann:
        request["podSetSliceRequiredTopology"] = ann["kueue.x-k8s.io/podset-slice-required-topology"]
        request["podSetSliceSize"] = int(ann["kueue.x-k8s.io/podset-slice-size"])
    pod_set = {"name": "main", "count": min(spec.get("parallelism", 1), spec.get("completions", spec.get("parallelism", 1))),
               "template": spec["template"]}
    if request:
        pod_set["topologyRequest"] = request
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"job-{job['metadata']['name']}", "namespace": job["metadata"]["namespace"]},
            "spec": {"queueName": job["metadata"]["labels"].get(q.QUEUE_LABEL, ""), "podSets": [pod_set]}}


def allowed(objs: list[dict[str, Any]], groups: set[str], verb: str, api_group: str, resource: str, ns: str) -> bool:
    """Kubernetes' RBAC authorizer over the Roles and RoleBindings given (gpufleet creates no
    ClusterRoleBinding for teams): a binding in `ns` naming one of the groups, to a Role in `ns`
    with a rule covering the apiGroup, resource and verb."""
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in of_kind(objs, "Role")}
    for b in of_kind(objs, "RoleBinding"):
        if b["metadata"]["namespace"] != ns or b["roleRef"]["kind"] != "Role":
            continue
        if not any(s["kind"] == "Group" and s["name"] in groups for s in b["subjects"]):
            continue
        role = roles.get((ns, b["roleRef"]["name"]))
        for rule in (role or {}).get("rules", []):
            if api_group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                return True
    return False


# --- the objects -----------------------------------------------------------------------------

def test_every_object_is_valid_under_the_crds_with_their_cel_and_the_kubernetes_schemas(teams):
    objs = objects(teams)
    kueue = [o for o in objs if o["apiVersion"].startswith(KUEUE_GROUP + "/")]
    assert {o["kind"] for o in kueue} >= {"Topology", "ResourceFlavor", "WorkloadPriorityClass", "Cohort",
                                          "ClusterQueue", "LocalQueue"}
    for obj in kueue:
        validate_kueue(obj)
    core = [o for o in objs if o["apiVersion"] in CORE_GROUPS]
    assert {"Namespace", "Role", "RoleBinding", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"} <= {o["kind"] for o in core}
    for obj in core:
        kubernetes_validate.validate(obj, teams.spec.pool.kubernetes_version, strict=True)


def test_each_team_gets_its_own_share_in_its_partitions_cohort(prod_teams):
    objs = objects(prod_teams)
    cqs = named(objs, "ClusterQueue")
    unit = prod_teams.plan.topology.unit_gpus

    def gpus(name: str) -> int:
        own = cqs[name]["spec"]["resourceGroups"][0]["flavors"][0]
        return next(r["nominalQuota"] for r in own["resources"] if r["name"] == GPU)
    # train's quota 80 units: vision asks for 50, lang gets what is left; debug's 4 split evenly; sim is lang's
    assert {n: gpus(n) // unit for n in cqs} == {"train": 0, "train-vision": 50, "train-lang": 30,
                                                 "sim": 0, "sim-lang": 16, "debug": 0, "debug-vision": 2,
                                                 "debug-lang": 2}
    for name, cq in cqs.items():
        partition = name.split("-")[0]
        assert cq["spec"]["cohortName"] == f"gpufleet-{partition}"
        assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"  # a lender takes its share back
    local = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
             for o in of_kind(objs, "LocalQueue")}
    assert local == {(n, n): n for n in cqs}  # one LocalQueue per queue namespace, named as it


def test_shares_beyond_the_partitions_quota_and_clashing_names_are_refused():
    spec = with_teams("prod")
    from gpufleet.plan import build_plan
    plan = build_plan(spec)
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["ops"]["tenants"][1]["quotaUnits"] = {"train": 31}  # 50 + 31 > 80
    over = type(spec).from_raw(raw, source="tests")
    with pytest.raises(ConfigError, match="add up to 81 units, more than its quota of 80") as e:
        q.queue_layout(over, plan, spec.cluster.instance)
    assert e.value.field == "gpufleet:ops.tenants[0].quotaUnits"
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["ops"]["tenants"].append({"name": "debug", "partitions": ["sim"]})  # a team named as a partition is fine
    names = {x.name for x in q.queue_layout(type(spec).from_raw(raw, source="tests"), plan, spec.cluster.instance)}
    assert {"sim-debug", "debug"} <= names
    clash = plan.model_copy(update={"partitions": (*plan.partitions,
                                                   plan.partitions[0].model_copy(update={"name": "sim-lang"}))})
    with pytest.raises(ConfigError, match="sim-lang"):
        q.queue_layout(spec, clash, spec.cluster.instance)
    with pytest.raises(ValidationError, match="does not submit to"):
        Tenant(name="x", partitions=("train",), quota_units={"sim": 1})


def test_kueue_manages_every_job_in_the_queue_namespaces_and_none_elsewhere(teams):
    (release,) = [r for r in teams.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "kueue"]
    config = yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["manageJobsWithoutQueueName"] is True
    selector = config["managedJobsNamespaceSelector"]
    namespaces = named(objects(teams), "Namespace")
    queue_ns = {o["metadata"]["namespace"] for o in of_kind(objects(teams), "LocalQueue")}
    for name, ns in namespaces.items():
        assert selects(selector, live_namespace(ns)["metadata"]["labels"]) == (name in queue_ns), name
    # the gates' MPIJobs and the smoke job run in the system namespace, unlabelled: Kueue leaves them alone
    assert SYSTEM_NAMESPACE in namespaces and SYSTEM_NAMESPACE not in queue_ns
    assert set(chart_values.KUEUE_FRAMEWORKS) == {"batch/job", "kubeflow.org/mpijob"}


# --- the submission policy -------------------------------------------------------------------

@pytest.fixture(scope="module")
def layout(prod_teams) -> dict[str, q.TeamQueue]:
    return {x.name: x for x in q.queue_layout(prod_teams.spec, prod_teams.plan, prod_teams.spec.cluster.instance)}


@pytest.fixture(scope="module")
def policy(prod_teams) -> dict[str, Any]:
    (pol,) = [r for r in prod_teams.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
              if r.inputs["metadata"]["name"] == POLICY]
    return pol.inputs


def plain_job(ns: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A user's Job as they might first write it: one pod of two GPUs, no queue."""
    meta: dict[str, Any] = {"name": "llm-eval", "namespace": ns}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "eval", "image": IMAGE, "resources": {"limits": {GPU: 2}}}]}}}}


def test_an_unlabelled_job_in_a_partition_namespace_is_refused_saying_what_to_add(policy, layout):
    train = layout["train-vision"]
    ns = live_namespace(q.namespace(train))
    job = plain_job(train.namespace)
    kubernetes_validate.validate(job, "1.33", strict=True)
    assert admit(policy, job, ns) == [
        "submit through this namespace's LocalQueue: label the job kueue.x-k8s.io/queue-name=train-vision "
        "(it has no queue label)",
        "jobs here run at their partition's priority: label the job kueue.x-k8s.io/priority-class=gpufleet-train"]
    assert admit(policy, plain_job(train.namespace, {}), ns)  # labels present but empty: the same
    assert admit(policy, plain_job(train.namespace, q.submission_labels(train)), ns) == []


def test_another_teams_queue_or_priority_is_refused(policy, layout):
    vision = layout["train-vision"]
    ns = live_namespace(q.namespace(vision))
    other = q.submission_labels(layout["train-lang"])
    (msg,) = admit(policy, plain_job(vision.namespace, {**other, q.PRIORITY_LABEL: vision.priority_class}), ns)
    assert msg.endswith("(it names train-lang)")
    (msg,) = admit(policy, plain_job(vision.namespace, {**q.submission_labels(vision),
                                                        q.PRIORITY_LABEL: "gpufleet-debug"}), ns)
    assert msg.endswith("kueue.x-k8s.io/priority-class=gpufleet-train")


def test_debug_jobs_must_ask_for_a_run_time_within_its_limit(policy, layout, prod_teams):
    debug = layout["debug-lang"]
    cap = prod_teams.spec.pool.slurm_interactive_max_minutes * 60
    assert debug.max_exec_seconds == cap and layout["train-lang"].max_exec_seconds is None
    ns = live_namespace(q.namespace(debug))
    labels = q.submission_labels(debug)
    assert labels[q.MAX_EXEC_LABEL] == str(cap)
    assert admit(policy, plain_job(debug.namespace, labels), ns) == []
    assert admit(policy, plain_job(debug.namespace, {**labels, q.MAX_EXEC_LABEL: "60"}), ns) == []
    for bad in (str(cap + 1), "0", "-5", "1h", "99999999999"):
        (msg,) = admit(policy, plain_job(debug.namespace, {**labels, q.MAX_EXEC_LABEL: bad}), ns)
        assert msg == f"jobs here have a run-time limit: label the job kueue.x-k8s.io/max-exec-time-seconds=<seconds>, at most {cap}"
    without = {k: v for k, v in labels.items() if k != q.MAX_EXEC_LABEL}
    assert len(admit(policy, plain_job(debug.namespace, without), ns)) == 1


def test_the_policy_covers_jobs_and_mpijobs_in_every_queue_namespace(policy, prod_teams):
    pol, binding = submission_policy()
    assert pol["spec"] == policy["spec"]
    kinds = {(r["apiGroups"][0], r["apiVersions"][0], r["resources"][0]) for r in pol["spec"]["matchConstraints"]["resourceRules"]}
    assert kinds == {("batch", "v1", "jobs"), ("kubeflow.org", "v2beta1", "mpijobs")}
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in pol["spec"]["matchConstraints"]["resourceRules"])
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    objs = objects(prod_teams)
    queue_ns = {o["metadata"]["namespace"] for o in of_kind(objs, "LocalQueue")}
    for name, ns in named(objs, "Namespace").items():
        assert selects(selector, live_namespace(ns)["metadata"]["labels"]) == (name in queue_ns), name
    assert binding["spec"]["validationActions"] == ["Deny"] and pol["spec"]["failurePolicy"] == "Fail"


# --- RBAC ------------------------------------------------------------------------------------

def test_a_team_acts_only_on_its_own_queues_jobs(prod_teams):
    objs = objects(prod_teams)
    vision, lang = {team_group("vision")}, {team_group("lang")}
    for verb in ("create", "delete", "get", "list", "watch", "patch"):
        assert allowed(objs, vision, verb, "batch", "jobs", "train-vision")
        assert allowed(objs, vision, verb, "kubeflow.org", "mpijobs", "debug-vision")
        assert not allowed(objs, vision, verb, "batch", "jobs", "train-lang")  # the other team's queue
        assert not allowed(objs, vision, verb, "batch", "jobs", "train")  # the operators' queue
        assert not allowed(objs, vision, verb, "batch", "jobs", "sim-lang")
    assert allowed(objs, lang, "delete", "batch", "jobs", "train-lang")
    assert not allowed(objs, lang, "delete", "batch", "jobs", "train-vision")
    # nothing that would run outside Kueue's quota, and no queue or namespace changes
    assert not allowed(objs, vision, "create", "", "pods", "train-vision")
    assert not allowed(objs, vision, "create", "apps", "deployments", "train-vision")
    assert allowed(objs, vision, "get", "", "pods", "train-vision") and allowed(objs, vision, "get", "", "pods/log", "train-vision")
    for verb in ("create", "update", "patch", "delete"):
        assert not allowed(objs, vision, verb, KUEUE_GROUP, "localqueues", "train-vision")
        assert not allowed(objs, vision, verb, "", "namespaces", "train-vision")
    assert allowed(objs, vision, "get", KUEUE_GROUP, "workloads", "train-vision")


# --- what users submit -----------------------------------------------------------------------

def documented_jobs(cap: Capture) -> list[dict[str, Any]]:
    """The README's unit jobs for the stack's queues: every seed mode the stack's partitions have."""
    layout = {x.name: x for x in q.queue_layout(cap.spec, cap.plan, cap.spec.cluster.instance)}
    t, mount = cap.plan.topology, cap.spec.storage.mount_path
    hostname = ["hostname"]
    if cap.stack == "inference":
        return uj.serving_pool_jobs(layout["prefill-serve"], layout["decode-serve"], t, IMAGE, hostname, hostname, mount)
    return [uj.all_units_job(layout["train-vision"], t, IMAGE, hostname, mount),
            uj.all_units_job(layout["train-lang"], t, IMAGE, hostname, mount, units=4),  # one block
            *uj.independent_unit_jobs(layout["sim-lang"], t, 3, IMAGE, hostname, mount),
            uj.all_units_job(layout["debug-vision"], t, IMAGE, hostname, mount)]


def test_the_documented_unit_jobs_pass_both_policies_and_name_what_exists(teams):
    objs = objects(teams)
    namespaces = named(objs, "Namespace")
    classes = named(objs, "WorkloadPriorityClass")
    queues = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in of_kind(objs, "LocalQueue")}
    pols = {r.inputs["metadata"]["name"]: r.inputs
            for r in teams.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")}
    priorities = {p.name: p.priority for p in teams.plan.partitions}
    jobs = documented_jobs(teams)
    assert jobs
    for job in jobs:
        kubernetes_validate.validate(job, teams.spec.pool.kubernetes_version, strict=True)
        meta = job["metadata"]
        ns = live_namespace(namespaces[meta["namespace"]])
        assert admit(pols[POLICY], job, ns) == [], meta["name"]
        wl = workload_of(job)
        assert admit(pols["gpufleet-whole-units"], wl) == [], meta["name"]
        assert (meta["namespace"], meta["labels"][q.QUEUE_LABEL]) in queues
        klass = classes[meta["labels"][q.PRIORITY_LABEL]]  # Kueue refuses a Workload naming a missing class
        assert klass["value"] == priorities[ns["metadata"]["labels"][q.PARTITION_NAMESPACE_LABEL]]
        gpus = wl["spec"]["podSets"][0]["count"] * job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU]
        assert gpus % teams.plan.topology.unit_gpus == 0
        stripped = copy.deepcopy(job)
        del stripped["metadata"]["labels"]
        assert admit(pols[POLICY], stripped, ns)  # the same job unlabelled: refused


@pytest.mark.parametrize("stack", ["prod", "inference"])
def test_the_documented_jobs_of_each_stack_as_shipped_and_with_teams_are_admitted(stack, full_capture):
    """Both with the stack as shipped (no teams: the operators' queues) and with teams."""
    for cap in (full_capture(stack), captured(stack)):
        layout = q.queue_layout(cap.spec, cap.plan, cap.spec.cluster.instance)
        modes = {p.name: p.mode for p in cap.plan.partitions}
        jobs = uj.documented_jobs(layout, modes, cap.plan.topology, IMAGE, ["hostname"], cap.spec.storage.mount_path)
        objs = objects(cap)
        namespaces = named(objs, "Namespace")
        pols = {r.inputs["metadata"]["name"]: r.inputs
                for r in cap.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")}
        assert {modes[namespaces[j["metadata"]["namespace"]]["metadata"]["labels"][q.PARTITION_NAMESPACE_LABEL]]
                for j in jobs} == set(modes.values())  # every partition's mode has its example
        for job in jobs:
            kubernetes_validate.validate(job, cap.spec.pool.kubernetes_version, strict=True)
            assert admit(pols[POLICY], job, live_namespace(namespaces[job["metadata"]["namespace"]])) == []
            assert admit(pols["gpufleet-whole-units"], workload_of(job)) == []
        assert len({(j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobs}) == len(jobs)


def test_the_seed_modes_shapes(prod_teams):
    t = prod_teams.plan.topology
    assert (t.unit_gpus, t.gpus_per_node, uj.pod_gpus(t), uj.pods_per_unit(t)) == (10, 8, 2, 5)
    big, block, *independent, _ = documented_jobs(prod_teams)
    ann = big["spec"]["template"]["metadata"]["annotations"]
    assert big["spec"]["parallelism"] == 50 * 5 and ann == {
        "kueue.x-k8s.io/podset-slice-required-topology": "node-restriction.kubernetes.io/gpufleet-block",
        "kueue.x-k8s.io/podset-slice-size": "5"}  # more than a block: each unit inside one block
    assert block["spec"]["parallelism"] == 20 and block["spec"]["template"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "node-restriction.kubernetes.io/gpufleet-block"}
    assert [j["spec"]["parallelism"] for j in independent] == [5, 5, 5]
    assert len({j["metadata"]["name"] for j in independent}) == 3
    with pytest.raises(ValueError):
        uj.unit_job("x", q.queue_layout(prod_teams.spec, prod_teams.plan, prod_teams.spec.cluster.instance)[0], t, 0,
                    IMAGE, ["hostname"], "/fsx")


def test_a_job_shape_kueue_would_scatter_is_refused_by_the_unit_policy(prod_teams):
    """What the submission policy does not see, the whole-unit policy on the Workload does."""
    t = prod_teams.plan.topology
    layout = q.queue_layout(prod_teams.spec, prod_teams.plan, prod_teams.spec.cluster.instance)
    job = uj.all_units_job(next(x for x in layout if x.name == "train-lang"), t, IMAGE, ["hostname"], "/fsx", units=2)
    del job["spec"]["template"]["metadata"]["annotations"]
    unit_pol = whole_unit_policy(t, [x.namespace for x in layout])[0]
    (msg,) = admit(unit_pol, workload_of(job))
    assert msg.startswith("this workload runs 10 GPU pods, so every GPU pod template must be placed by block")


def test_the_system_namespace_is_no_queue_namespace():
    assert q.KUEUE_MANAGED_LABEL not in plain_namespace(SYSTEM_NAMESPACE)["metadata"]["labels"]


def test_the_rendered_examples_are_the_documented_jobs_with_the_stacks_image(prod_teams):
    from gpufleet.plan import build_plan
    spec = prod_teams.spec
    with pytest.raises(ConfigError) as e:
        uj.render(spec, build_plan(spec))
    assert e.value.field == "gpufleet:acceptance.workloadImage"
    pinned = spec.model_copy(update={"acceptance": spec.acceptance.model_copy(update={"workload_image": IMAGE})})
    plan = build_plan(pinned)
    text = uj.render(pinned, plan)
    assert text.startswith("# prod: unit jobs for its Kueue queues")
    layout = q.queue_layout(pinned, plan, pinned.cluster.instance)
    assert list(yaml.safe_load_all(text)) == uj.documented_jobs(
        layout, {p.name: p.mode for p in plan.partitions}, plan.topology, IMAGE, ["hostname"], pinned.storage.mount_path)


# --- preemption between the teams' priorities ------------------------------------------------

def with_preemption(stack: str, tenants: list[dict[str, Any]] | None = None):
    """The stack (prod: its partitions borrow from each other) with preemption and team priorities."""
    spec = load_stack(stack)
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["pool"] = {**raw["pool"], "preemption": "requeue"}
    raw["ops"] = {**raw.get("ops", {}), "tenants": tenants or [
        {"name": "bulk", "partitions": ["train", "debug"]},
        {"name": "urgent", "partitions": ["train"], "priority": 50}]}
    return type(spec).from_raw(raw, source=f"tests: stack {stack} with team priorities")


def test_with_preemption_a_prioritised_team_submits_at_its_own_class_and_may_preempt_lower_borrowers():
    spec = with_preemption("prod")
    cap = capture_program(spec, stack="prod", target_batch=1)
    objs = objects(cap)
    classes = {o["metadata"]["name"]: o["value"] for o in of_kind(objs, "WorkloadPriorityClass")}
    train = next(p.priority for p in spec.partitions if p.name == "train")
    assert classes["gpufleet-train-urgent"] == train + 50 and classes["gpufleet-train"] == train
    assert "gpufleet-train-bulk" not in classes  # priority 0: the partition's class
    for o in of_kind(objs, "WorkloadPriorityClass") + of_kind(objs, "ClusterQueue"):
        validate_kueue(o)
    cqs = named(objs, "ClusterQueue")
    assert cqs["train-urgent"]["spec"]["preemption"] == {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                                                         "borrowWithinCohort": {"policy": "LowerPriority"}}
    layout = {x.name: x for x in q.queue_layout(spec, cap.plan, spec.cluster.instance)}
    urgent, bulk = layout["train-urgent"], layout["train-bulk"]
    (pol,) = [r.inputs for r in cap.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
              if r.inputs["metadata"]["name"] == POLICY]
    ns = live_namespace(named(objs, "Namespace")["train-urgent"])
    assert ns["metadata"]["labels"][q.PRIORITY_NAMESPACE_LABEL] == "gpufleet-train-urgent"
    assert admit(pol, plain_job("train-urgent", q.submission_labels(urgent)), ns) == []
    # the partition's class in urgent's queue is refused: a team submits at its own priority
    (msg,) = admit(pol, plain_job("train-urgent", {**q.submission_labels(urgent), q.PRIORITY_LABEL: "gpufleet-train"}), ns)
    assert msg.endswith("kueue.x-k8s.io/priority-class=gpufleet-train-urgent")
    # and what users are told to submit names it (gpufleet pool units)
    jobs = [d for d in yaml.safe_load_all(uj.render(spec.model_copy(update={"acceptance": spec.acceptance.model_copy(
        update={"workload_image": IMAGE})}), cap.plan)) if d and d.get("metadata", {}).get("namespace") == "train-urgent"]
    assert jobs and all(j["metadata"]["labels"][q.PRIORITY_LABEL] == "gpufleet-train-urgent" for j in jobs)
    assert q.submission_labels(bulk)[q.PRIORITY_LABEL] == "gpufleet-train"


def test_a_team_priority_that_would_outrank_a_higher_partition_it_borrows_from_is_refused(prod_teams):
    spec = with_preemption("prod", [{"name": "urgent", "partitions": ["debug"], "priority": 40}])
    assert spec.pool.kueue_cohort_borrowing  # prod's partitions lend each other blocks
    prios = {p.name: p.priority for p in spec.partitions}
    assert (prios["debug"], prios["sim"]) == (10, 50)  # debug's 10 + 40 would tie sim's class
    with pytest.raises(ConfigError, match="at or past a higher partition's 50") as err:
        q.queue_layout(spec, prod_teams.plan, spec.cluster.instance)
    assert err.value.field == "gpufleet:ops.tenants[0].priority"
    ok = with_preemption("prod", [{"name": "urgent", "partitions": ["debug"], "priority": 39}])
    assert q.queue_layout(ok, prod_teams.plan, ok.cluster.instance)[-1].class_value == 49


def test_the_patrols_class_is_the_lowest_and_valid_under_the_crds():
    """Issue 22 item 6: the patrol's recheck ranks below every workload, with or without team priorities."""
    for spec in (with_preemption("prod"), load_stack("prod")):
        cap = capture_program(spec, stack="prod", target_batch=1)
        classes = {o["metadata"]["name"]: o for o in of_kind(objects(cap), "WorkloadPriorityClass")}
        patrol = classes.pop(q.PATROL_PRIORITY_CLASS)
        validate_kueue(patrol)
        assert classes and all(patrol["value"] < o["value"] for o in classes.values()), (patrol, classes)
        assert patrol["value"] == min(o["value"] for o in classes.values()) - 1
