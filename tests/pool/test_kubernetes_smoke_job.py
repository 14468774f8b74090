"""The training smoke job on a Kubernetes pool: its objects against the Kubernetes OpenAPI schemas
(kubernetes-validate, offline), and the runner against the fake API server (the real `KubeApi`
over HTTP): logs in index order, everything it created deleted, a failed pod, the deadline, and
API failures."""

from __future__ import annotations

import random

import kubernetes_validate
import pytest

from gpufleet import catalog
from gpufleet.errors import PoolError
from gpufleet.pool.kubernetes.adapter import TIMEOUT_EXIT
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.job_runner import IndexedJobRunner, latest_by_index
from gpufleet.pool.kubernetes.manifests import FSX_CLAIM
from gpufleet.pool.kubernetes.retry import RetryPolicy
from gpufleet.pool.kubernetes.smoke_job import INDEX_ANNOTATION, JOB_LABEL, SmokeJob, master_addr, smoke_objects

from .kubernetes_fake_api import FakeApiServer, FakeTime
from .kubernetes_fake_jobs import FakeJobsKube, controller

NS = "gpufleet-system"
NODES = ("ip-10-64-0-10.us-east-2.compute.internal", "ip-10-64-0-11.us-east-2.compute.internal")
SLOTS = ["prod-b0000-n00000", "prod-b0000-n00001"]
IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/train@sha256:" + "a" * 64


def job(name: str = "gpufleet-smoke-0a1b2c3d", nodes=NODES, **kw) -> SmokeJob:
    base = dict(name=name, namespace=NS, image=IMAGE, python="python", script="print('hi')\n", node_names=tuple(nodes),
                instance=catalog.get("p5.48xlarge"), mount_path="/fsx", data_dir="/fsx/gpufleet-acceptance/smoke",
                steps=30, nccl_configmap="nccl-env-p5-48xlarge", timeout_s=900)
    return SmokeJob(**{**base, **kw})


def test_the_objects_are_valid_kubernetes_objects_that_wire_rendezvous_pinning_and_storage():
    objs = smoke_objects(job())
    for obj in (objs.job, objs.service, objs.configmap):
        kubernetes_validate.validate(obj, "1.33", strict=True)
    spec = objs.job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == \
        ("Indexed", 2, 2, 0)
    assert spec["activeDeadlineSeconds"] > 900  # the API server's own stop lies past the runner's deadline
    pod = spec["template"]["spec"]
    # pod 0 is <job>-0 under the headless Service named like the Job: torchrun's master address
    assert pod["subdomain"] == objs.service["metadata"]["name"] == "gpufleet-smoke-0a1b2c3d"
    assert objs.service["spec"]["clusterIP"] == "None" and objs.service["spec"]["publishNotReadyAddresses"]
    assert objs.service["spec"]["selector"] == {JOB_LABEL: "gpufleet-smoke-0a1b2c3d"}
    assert spec["template"]["metadata"]["labels"][JOB_LABEL] == "gpufleet-smoke-0a1b2c3d"
    (container,) = pod["containers"]
    cmd = container["command"]
    assert cmd[:3] == ["python", "-m", "torch.distributed.run"]
    assert {"--nnodes=2", "--nproc-per-node=8", "--node-rank=$(NODE_RANK)",
            f"--master-addr={master_addr('gpufleet-smoke-0a1b2c3d')}", "--data-dir=/fsx/gpufleet-acceptance/smoke",
            "--steps=30"} <= set(cmd)
    assert master_addr("gpufleet-smoke-0a1b2c3d") == "gpufleet-smoke-0a1b2c3d-0.gpufleet-smoke-0a1b2c3d"
    (rank,) = container["env"]
    assert rank["name"] == "NODE_RANK" and INDEX_ANNOTATION in rank["valueFrom"]["fieldRef"]["fieldPath"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    # one pod on each chosen Node, and only there
    expr = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]
    assert expr == {"key": "kubernetes.io/hostname", "operator": "In", "values": list(NODES)}
    (anti,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == {JOB_LABEL: "gpufleet-smoke-0a1b2c3d"}
    assert [t["key"] for t in pod["tolerations"]] == ["gpufleet.io/gate"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == FSX_CLAIM
    assert volumes["script"]["configMap"]["name"] == objs.configmap["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert cmd[cmd.index("--data-dir=/fsx/gpufleet-acceptance/smoke") - 1] == f"{mounts['script']}/train_smoke.py"
    assert mounts["shared"] == "/fsx" and mounts["shm"] == "/dev/shm"
    assert objs.configmap["data"] == {"train_smoke.py": "print('hi')\n"}
    assert container["envFrom"] == [{"configMapRef": {"name": "nccl-env-p5-48xlarge"}}]
    broken = {**objs.job, "spec": {**spec, "parallelism": "two"}}  # the validator does catch a mistake
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.33", strict=True)


@pytest.mark.parametrize("nodes", [NODES[:1], (NODES[0], NODES[0])])
def test_one_node_or_a_node_twice_is_refused(nodes):
    with pytest.raises(ValueError, match="two or more distinct nodes"):
        smoke_objects(job(nodes=nodes))


@pytest.fixture
def server():
    with FakeApiServer(FakeJobsKube()) as s:
        yield s


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


def runner(server: FakeApiServer, clock: FakeTime, deadline_s: float = 30.0) -> IndexedJobRunner:
    policy = RetryPolicy(deadline_s=deadline_s, sleep=clock.sleep, clock=clock.clock, rng=random.Random(3))
    return IndexedJobRunner(KubeApi(server.api_client(), policy), namespace=NS, poll_s=5, sleep=clock.sleep,
                            clock=clock.clock)


def nothing_left(kube: FakeJobsKube) -> bool:
    return not kube.jobs and not kube.services and not kube.configmaps and not kube.pods


def test_a_run_returns_every_pods_log_in_index_order_and_deletes_what_it_created(server, clock):
    kube: FakeJobsKube = server.kube
    kube.on_job = controller(["rank 0 says\n", "rank 1 says"])
    objs = smoke_objects(job())
    result = runner(server, clock).run(objs, SLOTS, timeout_s=600)
    assert result.exit_code == 0 and result.nodes == tuple(SLOTS) and result.command == objs.command
    lines = result.output.splitlines()
    assert lines == [f"# pod gpufleet-smoke-0a1b2c3d-0-x0 (index 0, node {NODES[0]}): Succeeded, exit 0",
                     "rank 0 says",
                     f"# pod gpufleet-smoke-0a1b2c3d-1-x1 (index 1, node {NODES[1]}): Succeeded, exit 0",
                     "rank 1 says"]
    # the ConfigMap and Service were owned by the created Job (its uid), so they go with it
    posted = {body["kind"]: body for path, body in kube.posts}
    for kind in ("ConfigMap", "Service"):
        (owner,) = posted[kind]["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "gpufleet-smoke-0a1b2c3d", "uid-1")
    assert nothing_left(kube)
    (job_delete,) = [q for p, q in kube.deletes if "/jobs/" in p]
    assert job_delete["propagationPolicy"] == "Background"  # the API's default for a Job orphans its pods


def test_a_failed_pod_still_returns_every_log_with_its_exit_code(server, clock):
    kube: FakeJobsKube = server.kube
    kube.on_job = controller(["ok\n", "Traceback ...\nRuntimeError: NCCL error\n"], codes=[0, 3])
    result = runner(server, clock).run(smoke_objects(job()), SLOTS, timeout_s=600)
    assert result.exit_code == 3
    assert "ok\n" in result.output and "RuntimeError: NCCL error" in result.output
    assert "(index 1, node ip-10-64-0-11.us-east-2.compute.internal): Failed, exit 3" in result.output
    assert nothing_left(kube)


def test_a_run_past_its_deadline_is_a_timeout_and_is_deleted(server, clock):
    kube: FakeJobsKube = server.kube
    kube.on_job = controller(["step 1\n", ""], finish=False, started=[True, False])
    result = runner(server, clock).run(smoke_objects(job()), SLOTS, timeout_s=60)
    assert result.exit_code == TIMEOUT_EXIT and clock.now >= 60
    assert "Running" in result.output and "step 1" in result.output
    assert "Pending, waiting: ContainerCreating" in result.output
    assert "(no log: the container never started)" in result.output
    assert not [p for m, p, _ in kube.requests if m == "GET" and p.endswith("-1-x1/log")]  # never asked
    assert nothing_left(kube)


def test_an_api_failure_raises_a_pool_error_and_removes_what_was_created(server, clock):
    kube: FakeJobsKube = server.kube
    kube.on_job = controller(["never read\n"] * 2)
    kube.fail(403, method="POST", path=f"/api/v1/namespaces/{NS}/services")
    with pytest.raises(PoolError, match=r"create Service .* answered 403"):
        runner(server, clock).run(smoke_objects(job()), SLOTS, timeout_s=600)
    assert nothing_left(kube)  # the Job (with its pods) and the ConfigMap made before it are gone


def test_an_api_server_that_stays_down_gives_up_within_the_retry_deadline(server, clock):
    kube: FakeJobsKube = server.kube
    kube.fail(503, method="POST", path=f"/apis/batch/v1/namespaces/{NS}/jobs", times=1000)
    with pytest.raises(PoolError, match="unavailable"):
        runner(server, clock, deadline_s=20).run(smoke_objects(job()), SLOTS, timeout_s=600)
    assert nothing_left(kube) and clock.now <= 20


def test_a_replaced_pod_is_read_from_its_newest_instance():
    def pod(name: str, index: int, created: str):
        return {"metadata": {"name": name, "creationTimestamp": created, "annotations": {INDEX_ANNOTATION: str(index)}}}
    chosen = latest_by_index([pod("b", 1, "2026-11-30T00:00:05Z"), pod("a-old", 0, "2026-11-30T00:00:00Z"),
                              pod("a-new", 0, "2026-11-30T00:01:00Z"), {"metadata": {"name": "stray"}}])
    assert [(i, p["metadata"]["name"]) for i, p in chosen] == [(0, "a-new"), (1, "b")]


def test_a_job_post_that_landed_before_its_retry_is_adopted_and_a_foreign_job_is_left_alone(server, clock):
    kube: FakeJobsKube = server.kube
    objs = smoke_objects(job())
    kube.jobs[(NS, "gpufleet-smoke-0a1b2c3d")] = {**objs.job, "metadata": {
        **objs.job["metadata"], "uid": "uid-landed"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    result = runner(server, clock).run(objs, SLOTS, timeout_s=600)  # the POST answers 409: its own Job
    assert result.exit_code == 0 and "no pod was created" in result.output
    owners = {body["kind"]: body["metadata"]["ownerReferences"][0]["uid"] for path, body in kube.posts
              if body["kind"] != "Job"}
    assert owners == {"ConfigMap": "uid-landed", "Service": "uid-landed"} and nothing_left(kube)

    other = smoke_objects(job(steps=99))  # same name, another launch's command
    kube.jobs[(NS, "gpufleet-smoke-0a1b2c3d")] = other.job
    with pytest.raises(PoolError, match="not this launch's"):
        runner(server, clock).run(objs, SLOTS, timeout_s=600)
    assert list(kube.jobs) == [(NS, "gpufleet-smoke-0a1b2c3d")]  # not ours: not deleted


def test_kueue_leaves_the_smoke_job_alone():
    """With `manageJobsWithoutQueueName: true` Kueue would suspend an unlabelled Job in a namespace its
    selector matches, and the smoke job, pinned to the canary nodes, would never start: it runs in
    the system namespace, which the selector does not match, and names no queue or priority class."""
    import yaml

    from gpufleet.pool.kubernetes.chart_values import kueue_manager_config
    from gpufleet.pool.kubernetes.manifests import SYSTEM_NAMESPACE, namespace
    from gpufleet.pool.kubernetes.queues import PRIORITY_LABEL, QUEUE_LABEL
    from gpufleet.pool.kubernetes.adapter import KubernetesPool, MpiJobLauncher

    config = yaml.safe_load(kueue_manager_config())
    assert config["manageJobsWithoutQueueName"] is True
    wanted = config["managedJobsNamespaceSelector"]["matchLabels"]
    labels = {**namespace(SYSTEM_NAMESPACE)["metadata"]["labels"], "kubernetes.io/metadata.name": SYSTEM_NAMESPACE}
    assert not all(labels.get(k) == v for k, v in wanted.items())
    import inspect
    # the smoke collector runs in the pool's namespace (rollout/kubernetes_smoke.py), the gates' and
    # patrol's MPIJobs in the launcher's: both the system namespace unless a caller says otherwise
    for runs_jobs in (KubernetesPool, MpiJobLauncher, IndexedJobRunner):
        assert inspect.signature(runs_jobs).parameters["namespace"].default == SYSTEM_NAMESPACE
    objs = smoke_objects(job())
    for obj in (objs.job, objs.job["spec"]["template"]):
        assert not {QUEUE_LABEL, PRIORITY_LABEL} & set(obj["metadata"]["labels"])
