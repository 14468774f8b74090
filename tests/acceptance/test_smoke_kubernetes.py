"""The training smoke job on a Kubernetes stack, end to end without a cluster: `stack_hooks` wires
the Indexed Job collector; the rollout's runner launches it through the real `KubeApi` against the
fake API server, whose kubelets run each pod's generated torchrun command for real (torch CPU,
gloo); the pods' logs, collected in index order, make a bundle that passes the smoke checks and
records the training baseline, and a planted gradient corruption on one rank is caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet import catalog
from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import read_bundle
from gpufleet.gates.verdict import Verdict
from gpufleet.plan import build_plan
from gpufleet.pool.kubernetes.adapter import KubernetesPool
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.job_runner import IndexedJobRunner
from gpufleet.pool.kubernetes.smoke_job import SCRIPT_DIR, SCRIPT_NAME, script_configmap_name
from gpufleet.pool.protocol import PendingNode
from gpufleet.rollout.acceptance import stack_hooks
from gpufleet.rollout.kubernetes_smoke import NO_IMAGE, KubernetesSmokeCollector, project_script
from gpufleet.rollout.run_config import Adapters
from gpufleet.rollout.wiring import Wiring
from gpufleet.spec import ClusterSpec
from tests.acceptance.test_smoke_slurm import ensure_torch, free_port
from tests.pool.kubernetes_fake_api import FakeApiServer
from tests.pool.kubernetes_fake_jobs import FakeJobsKube, run_pods
from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import small_spec

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/train@sha256:" + "b" * 64


def kubernetes_spec(image: str | None = IMAGE) -> ClusterSpec:
    spec = small_spec()
    return spec.model_copy(update={
        "pool": spec.pool.model_copy(update={"type": "kubernetes"}),
        "acceptance": spec.acceptance.model_copy(update={
            "workload_image": image, "smoke_steps": 25, "smoke_min_samples_per_second": 50,
            "smoke_loss_factor": 0.5})})


class Kubelets:
    """Runs a created Job's pods for real when the runner first polls it, as the nodes' kubelets
    would: the container's command with `$(NODE_RANK)` expanded to the pod's index, the image's
    interpreter being this one, the script ConfigMap's files under each pod's own folder, the FSx
    claim one folder all pods share, and the headless Service's name for pod 0 standing for
    127.0.0.1 (the pods here share one network namespace, so the port is a free one). One rank
    per pod: this CPU stands in for a node's GPUs."""

    def __init__(self, root: Path, mount_path: str) -> None:
        self.root, self.mount_path = root, mount_path
        self.commands: list[list[str]] = []

    def __call__(self, kube: FakeJobsKube, method: str, path: str) -> None:
        if method != "GET" or "/jobs/" not in path:
            return
        for (ns, name), job in kube.jobs.items():
            if "status" not in job:
                self.run(kube, ns, name, job)

    def run(self, kube: FakeJobsKube, ns: str, name: str, job: dict[str, Any]) -> None:
        (container,) = job["spec"]["template"]["spec"]["containers"]
        script = kube.configmaps[(ns, script_configmap_name(name))]["data"]
        port = free_port()
        procs = []
        for index in range(job["spec"]["completions"]):
            pod_dir = self.root / f"{name}-{index}"
            (pod_dir / "script").mkdir(parents=True)
            (pod_dir / "script" / SCRIPT_NAME).write_text(script[SCRIPT_NAME], encoding="utf-8")
            argv = [self.pod_arg(a, index, pod_dir, port) for a in container["command"]]
            argv[0] = sys.executable
            self.commands.append(argv)
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=env))
        logs, codes = [], []
        try:
            for proc in procs:
                out, _ = proc.communicate(timeout=240)
                logs.append(out)
                codes.append(proc.returncode)
        finally:
            for proc in procs:  # none outlives the test, even one stuck in its rendezvous
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        run_pods(kube, job, logs, codes)

    def pod_arg(self, arg: str, index: int, pod_dir: Path, port: str) -> str:
        if arg.startswith("--nproc-per-node="):
            return "--nproc-per-node=1"
        if arg.startswith("--master-addr="):
            return "--master-addr=127.0.0.1"
        if arg.startswith("--master-port="):
            return f"--master-port={port}"
        arg = arg.replace("$(NODE_RANK)", str(index)).replace(SCRIPT_DIR, str(pod_dir / "script"))
        return arg.replace(f"={self.mount_path}", f"={self.root / 'fsx'}")


@pytest.fixture
def cluster(tmp_path: Path):
    """A Kubernetes pool over the fake API server whose first two slots have joined as Nodes."""
    ensure_torch()
    spec = kubernetes_spec()
    plan = build_plan(spec)
    slots = [n.name for n in plan.batch_nodes(1)][:2]
    kube = FakeJobsKube()
    for i, slot in enumerate(slots):
        kube.add_node(f"ip-10-64-0-{10 + i}.us-east-2.compute.internal", slot, instance_id=f"i-0{i:016x}")
    kube.on_request = Kubelets(tmp_path / "pods", spec.storage.mount_path)
    with FakeApiServer(kube) as server:
        pool = KubernetesPool(KubeApi(server.api_client()), partitions=[p.name for p in plan.partitions])
        pool.register_pending([PendingNode(slot=s, block=plan.nodes[0].block) for s in slots])
        yield spec, plan, slots, pool, kube


def kubernetes_wiring(pool: Any) -> Wiring:
    cloud = FakeCloud()
    return Wiring(Adapters(cloud, cloud, pool, cloud.clock), threaded=True, acceptance=object())


def test_the_smoke_job_runs_as_an_indexed_job_and_its_pod_logs_pass_the_checks(cluster, tmp_path, monkeypatch):
    spec, plan, slots, pool, kube = cluster
    monkeypatch.setenv("GPUFLEET_PROJECT", str(ROOT))  # the script comes from the project, read at launch
    hooks = stack_hooks(spec, plan, tmp_path / "state", wiring=kubernetes_wiring(pool))
    assert hooks is not None and hooks.smoke_unavailable is None
    collector = hooks.runner.collector.by_stage["smoke"]
    assert isinstance(collector, KubernetesSmokeCollector)
    collector.runner = IndexedJobRunner(pool.api, namespace=pool.namespace, poll_s=0.05)
    hooks.runner.journal.append({"type": "rollout", "to": "started", "layout": "x", "batches": [1],
                                 "spare_nodes": 0, "instance_type": spec.cluster.instance_type})

    assert hooks.after_canary(slots) is None, hooks.runner.journal.state.acceptance["smoke"]
    smoke = hooks.runner.journal.state.acceptance["smoke"]
    assert smoke.status.value == "passed"
    bundle = read_bundle(tmp_path / "state" / smoke.bundle)
    text = bundle.get(A.TRAIN_SMOKE).text
    assert text.index("(index 0, node ip-10-64-0-10") < text.index("(index 1, node ip-10-64-0-11")
    assert bundle.get(A.TRAIN_SMOKE).exit_code == 0
    base = json.loads((tmp_path / "state" / "baselines" / "training.json").read_text())
    assert base["world_size"] == 2 and base["backend"] == "gloo" and base["last_loss"] <= 0.5 * base["first_loss"]
    assert list((tmp_path / "pods" / "fsx" / "gpufleet-acceptance" / "smoke").glob("smoke-dataset-*.pt"))
    ran = kube.on_request.commands  # the image's interpreter (smokeImagePython) ran torchrun, as node rank 0 and 1
    assert kube.posts[0][1]["spec"]["template"]["spec"]["containers"][0]["command"][0] == "python"
    assert [a for a in ran[1] if a.startswith("--node-rank=")] == ["--node-rank=1"]
    assert not kube.jobs and not kube.configmaps and not kube.services and not kube.pods  # all deleted


def test_a_corrupted_gradient_on_one_rank_is_caught(cluster, tmp_path):
    spec, plan, slots, pool, kube = cluster
    collector = KubernetesSmokeCollector(pool, spec, catalog.get(spec.cluster.instance_type),
                                         lambda: (ROOT / A.SMOKE_SCRIPT).read_text(encoding="utf-8"),
                                         runner=IndexedJobRunner(pool.api, namespace=pool.namespace, poll_s=0.05),
                                         extra=["--corrupt-gradient-rank=1"])
    bundle = read_bundle(collector.collect("smoke", slots, [], tmp_path / "bundle"))
    assert bundle.get(A.TRAIN_SMOKE).exit_code == 0, bundle.get(A.TRAIN_SMOKE).text[-2000:]
    bad = [c for c in A.smoke_checks(bundle, None, spec.acceptance) if c.verdict.blocks_admission]
    assert [c.reason_code for c in bad] == ["smoke-ranks-diverged"] and bad[0].verdict is Verdict.QUARANTINE
    assert "rank(s) 1" in bad[0].message


def test_a_kubernetes_stack_without_a_workload_image_journals_the_smoke_stage_not_applicable(tmp_path):
    spec = kubernetes_spec(image=None)
    plan = build_plan(spec)
    hooks = stack_hooks(spec, plan, tmp_path, wiring=kubernetes_wiring(SimpleNamespace(kind="kubernetes")))
    assert hooks is not None and hooks.smoke_unavailable == NO_IMAGE
    assert "smoke" not in hooks.runner.collector.by_stage
    (finding,) = [f for f in plan.findings if f.code == "SMOKE_NOT_RUN"]  # `validate` says so up front
    assert finding.level.value == "WARNING" and finding.field == "gpufleet:acceptance.workloadImage"
    assert not [f for f in build_plan(kubernetes_spec()).findings if f.code == "SMOKE_NOT_RUN"]


def test_the_script_comes_from_the_project_and_a_missing_one_names_its_path(tmp_path):
    from gpufleet.errors import ConfigError
    from gpufleet.project import load_project

    assert project_script(load_project(ROOT)) == (ROOT / A.SMOKE_SCRIPT).read_text(encoding="utf-8")
    (tmp_path / "Pulumi.yaml").write_text("name: empty\nruntime: python\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"images/workloads/train_smoke.py.*cannot read"):
        project_script(load_project(tmp_path))
