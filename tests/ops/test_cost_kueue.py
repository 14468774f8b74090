"""Kueue Workloads read through the kubernetes client from the pool tests' fake API server (a
Workloads route added here by subclassing it): pages followed, admitted workloads become usage
with their GPUs, team and nodes, an API error is an error; `gpufleet cost` on a Kubernetes stack
reads them through the kubeconfig in effect and exits 1 when the API fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.cost.kueue import KubernetesWorkloads, KueueError, usages
from gpufleet.pool.kubernetes.versions import KUEUE_API_VERSION
from tests.ops.cost_helpers import at, project_with_stack, workload
from tests.pool.kubernetes_fake_api import FakeApiServer, FakeKube

WORKLOADS_PATH = f"/apis/{KUEUE_API_VERSION}/workloads"


@dataclass
class KueueKube(FakeKube):
    workloads: list[dict[str, Any]] = field(default_factory=list)

    def _route(self, method, path, query, headers, body):
        if path == WORKLOADS_PATH and method == "GET":
            return self._list(self.workloads, query)
        return super()._route(method, path, query, headers, body)


@pytest.fixture
def server():
    kube = KueueKube(workloads=[
        workload("pretrain", finished="2026-11-01T03:00:00Z", hosts=("n1", "n2"), team="vision"),
        workload("serve", ns="debug", count=1, gpus="4"),
        workload("queued", admitted=None),
        workload("requeued", admitted_status="False"),
    ])
    with FakeApiServer(kube) as srv:
        yield srv


def _source(server) -> KubernetesWorkloads:
    src = KubernetesWorkloads(server.api_client(), KUEUE_API_VERSION.split("/")[1])
    src.PAGE = 2
    return src


def test_workloads_are_listed_page_by_page_and_become_usage(server) -> None:
    jobs, skipped = usages(_source(server))
    assert server.kube.count("GET", WORKLOADS_PATH) == 2  # four workloads, two a page
    by_id = {j.job_id: j for j in jobs}
    assert set(by_id) == {"train/pretrain", "debug/serve"}
    assert (by_id["train/pretrain"].gpus, by_id["train/pretrain"].team, by_id["train/pretrain"].nodes,
            by_id["train/pretrain"].end) == (16, "vision", ("n1", "n2"), at(3))
    assert by_id["debug/serve"].running and by_id["debug/serve"].gpus == 4 and by_id["debug/serve"].partition == "debug"
    assert len(skipped) == 1 and "train/requeued" in skipped[0]


def test_an_api_error_listing_workloads_is_an_error_not_an_empty_list(server) -> None:
    server.kube.fail(503, path=WORKLOADS_PATH, times=10)
    with pytest.raises(KueueError, match="503"):
        usages(_source(server))


def _kubeconfig(path, url: str) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}))
    return str(path)


def test_the_cost_command_reads_a_kubernetes_stacks_workloads(server, tmp_path) -> None:
    project = project_with_stack(tmp_path / "project", "k8s", price=80.0, pool="kubernetes")
    server.kube.add_node("n1", "k8s-b0000-n00000")
    server.kube.add_node("n2", "k8s-b0000-n00001")
    env = {"KUBECONFIG": _kubeconfig(tmp_path / "kubeconfig", server.url)}
    args = ["--project", str(project), "cost", "-s", "k8s", "--since", "2026-10-31", "--until", "2026-11-02",
            "--format", "json"]
    result = CliRunner(env=env).invoke(main, args)
    assert result.exit_code == 0, result.output
    report = yaml.safe_load((project / "reports" / "k8s" / "cost.json").read_text())
    assert {g["name"]: g["gpu_hours"] for g in report["by_team"]} == {"debug": 4 * 23, "vision": 16 * 2}  # running: clipped at --until
    assert "no rollout journal" in report["idle_unavailable"]  # never rolled out: idle units unknown, not zero
    nodes = {j["job_id"]: j["nodes"] for j in report["jobs"]}
    assert nodes == {"train/pretrain": "k8s-b0000-n[00000-00001]", "debug/serve": ""}  # Node names mapped to slots
    server.kube.fail(500, path=WORKLOADS_PATH, times=10)
    failed = CliRunner(env=env).invoke(main, args)
    assert failed.exit_code == 1 and "Kueue" in failed.output, failed.output
