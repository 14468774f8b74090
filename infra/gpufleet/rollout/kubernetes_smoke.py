"""The training smoke stage on a Kubernetes pool: the collector `stack_hooks` gives the runner.

Where a Slurm pool starts the job with srun (`LauncherSmokeCollector`), a Kubernetes pool runs it
as an Indexed Job of torchrun pods (`gpufleet.pool.kubernetes.smoke_job`, why that shape is there) in
the pool's system namespace, on the admitted canary nodes' Nodes, and keeps the pods' logs, in
node-rank order, as the stage's bundle for `gpufleet.gates.acceptance.smoke_checks`.

Its image is `acceptance.workloadImage`: the nodes run no Python with torch of their own, so a
stack that names no image has no smoke job to run on Kubernetes (`unavailable`); the stage is
then journaled not applicable with that reason (and `validate` warns, SMOKE_NOT_RUN). The image's
interpreter is `acceptance.smokeImagePython`. The script is the project's
`images/workloads/train_smoke.py`, read when the job is launched.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from gpufleet.catalog import InstanceType
from gpufleet.errors import ConfigError
from gpufleet.gates import acceptance as A
from gpufleet.pool.kubernetes.job_runner import IndexedJobRunner
from gpufleet.pool.kubernetes.manifests import nccl_configmap_name
from gpufleet.pool.kubernetes.smoke_job import SmokeJob, SmokeObjects, smoke_objects
from gpufleet.pool.protocol import LaunchResult
from gpufleet.project import Project
from gpufleet.rollout.smoke_stage import SMOKE, smoke_bundle, smoke_paths
from gpufleet.spec import ClusterSpec

NO_IMAGE = ("no acceptance.workloadImage: the kubernetes pool runs the smoke job in that container image "
            "(torch; its nodes have none), and the stack names none")


class JobRunner(Protocol):
    def run(self, objects: SmokeObjects, slots: Sequence[str], timeout_s: float) -> LaunchResult: ...


def unavailable(spec: ClusterSpec) -> str | None:
    """Why this Kubernetes stack cannot run the smoke job (journaled as not applicable), else None."""
    return NO_IMAGE if spec.acceptance.workload_image is None else None


def project_script(project: Project) -> str:
    """The project's smoke script, the text the job's ConfigMap carries."""
    path = project.path(A.SMOKE_SCRIPT)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the training smoke job's script ({exc.strerror or exc})", path=str(path),
                          expected="the project's images/workloads/train_smoke.py (`gpufleet init` writes it)"
                          ) from None


def new_job_name() -> str:
    """A fresh name per launch: a retried stage never meets a predecessor's objects still being deleted."""
    return f"gpufleet-smoke-{secrets.token_hex(4)}"


class KubernetesSmokeCollector:
    """`pool`: the Kubernetes pool (its `api`, `namespace` and `node_names`); `script`: the script's text."""

    def __init__(self, pool: Any, spec: ClusterSpec, instance: InstanceType, script: Callable[[], str], *,
                 runner: JobRunner | None = None, timeout_s: float = 900, extra: Sequence[str] = (),
                 job_name: Callable[[], str] = new_job_name) -> None:
        if spec.acceptance.workload_image is None:
            raise ValueError(NO_IMAGE)
        self.pool, self.spec, self.instance, self.script = pool, spec, instance, script
        self.runner = runner if runner is not None else IndexedJobRunner(pool.api, namespace=pool.namespace)
        self.timeout_s, self.extra, self.job_name = timeout_s, tuple(extra), job_name

    def job(self, slots: Sequence[str]) -> SmokeJob:
        names = self.pool.node_names(list(slots))
        cfg = self.spec.acceptance
        assert cfg.workload_image is not None
        return SmokeJob(name=self.job_name(), namespace=self.pool.namespace, image=cfg.workload_image,
                        python=cfg.smoke_image_python, script=self.script(), node_names=tuple(names[s] for s in slots),
                        instance=self.instance, mount_path=self.spec.storage.mount_path,
                        data_dir=smoke_paths(self.spec)[1], steps=cfg.smoke_steps,
                        nccl_configmap=nccl_configmap_name(self.instance.name), timeout_s=self.timeout_s,
                        extra=self.extra)

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        if stage != SMOKE:
            raise ValueError(f"the Kubernetes smoke collector collects the smoke stage only, not {stage!r}")
        result = self.runner.run(smoke_objects(self.job(nodes)), list(nodes), self.timeout_s)
        return smoke_bundle(out, result, "kubernetes-job")
