"""The training smoke job on a Kubernetes pool, as plain objects: an Indexed Job, its headless
Service and the script's ConfigMap. Pure (no client, no I/O); `job_runner` creates and reaps them.

Why these shapes and no operator:
- A batch/v1 Job with `completionMode: Indexed` (parallelism = completions = nodes) is what JobSet
  builds its replicated jobs from, and it needs nothing installed: the pool has the MPI operator for
  the gates, but an MPIJob starts ranks through mpirun and SSH, where torch's own launcher wants one
  process per node that starts the node's ranks. Kueue leaves it alone (it names no queue, and
  the pool's Kueue runs with manageJobsWithoutQueueName off), as it does the gates' MPIJobs.
- Pod `i` is node rank `i` (`JOB_COMPLETION_INDEX`, read into NODE_RANK through the index
  annotation, so the `$(NODE_RANK)` in the arguments is a variable of the container's own env) and
  runs `python -m torch.distributed.run` with static rendezvous on pod 0: the Job names pod `i`'s
  host `<job>-<i>`, and `subdomain` plus a headless Service of the same name gives it the DNS name
  `<job>-0.<job>`, published before the pod is ready (`publishNotReadyAddresses`) because the other
  nodes connect while it starts. torchrun's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* reach the script.
- One pod per chosen Node: a required hostname affinity naming the slots' Nodes and an
  anti-affinity on the job's own label, as the gates' MPIJob workers are pinned; the gate taint is
  tolerated (the quarantine taint is not: a quarantined node is not one to train on). Each pod
  takes the whole node (every GPU and EFA device, `gpufleet.gates.launch.node_resources`) and
  `/dev/shm` in memory (a container's default 64 MiB is too small for NCCL's shared segments).
- The image is `acceptance.workloadImage`, pinned by digest and pre-pulled on every node during
  configure; the script is the project's `images/workloads/train_smoke.py`, shipped at launch as a
  ConfigMap, so the job runs what this project holds, not what the image happens to carry.
- The dataset goes to the stack's FSx file system through the claim the pool objects create in
  every pool namespace (`fsx`), mounted where the nodes mount it, so the data folder is the same
  path as on a Slurm pool; the job environment is the pool's NCCL ConfigMap (`envFrom`).
- The API server ends the job by itself if gpufleet does not (`activeDeadlineSeconds`), and removes
  it later (`ttlSecondsAfterFinished`); the runner makes the ConfigMap and Service owned by the Job,
  so an interrupted rollout leaves nothing behind for long.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gpufleet.catalog import InstanceType
from gpufleet.gates.launch import node_resources
from gpufleet.pool.kubernetes.manifests import FSX_CLAIM, HOSTNAME_LABEL, MANAGED_BY
from gpufleet.pool.protocol import GATE_TAINT

JOB_LABEL = "gpufleet.io/smoke-job"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SCRIPT_DIR = "/opt/gpufleet-smoke"
SCRIPT_NAME = "train_smoke.py"
MASTER_PORT = 29500  # torch's customary port; pods have their own network namespace, so it is free
DEADLINE_MARGIN_S = 300  # the API server's own deadline lies past the runner's: the runner reads logs first
TTL_AFTER_FINISHED_S = 3600
SHM_LIMIT = "16Gi"


@dataclass(frozen=True)
class SmokeJob:
    """One launch of the smoke job: `node_names` are the Nodes (not slots), one pod each, in index order."""

    name: str
    namespace: str
    image: str
    python: str
    script: str  # the script's text
    node_names: tuple[str, ...]
    instance: InstanceType
    mount_path: str  # where the FSx claim is mounted (the nodes' storage.mountPath)
    data_dir: str  # under mount_path
    steps: int
    nccl_configmap: str
    timeout_s: float
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class SmokeObjects:
    job: dict[str, Any]
    service: dict[str, Any]
    configmap: dict[str, Any]

    @property
    def command(self) -> str:
        container = self.job["spec"]["template"]["spec"]["containers"][0]
        return shlex.join(container["command"])


def script_configmap_name(job: str) -> str:
    return f"{job}-script"


def master_addr(job: str) -> str:
    """Pod 0's name under the headless Service (`<hostname>.<subdomain>`, the namespace's search domain)."""
    return f"{job}-0.{job}"


def smoke_objects(s: SmokeJob) -> SmokeObjects:
    if len(s.node_names) < 2 or len(set(s.node_names)) != len(s.node_names):
        raise ValueError(f"the smoke job runs on two or more distinct nodes, not {list(s.node_names)}")
    labels = {**MANAGED_BY, "gpufleet.io/purpose": "acceptance-smoke", JOB_LABEL: s.name}
    meta = {"namespace": s.namespace, "labels": labels}
    nodes = len(s.node_names)
    command = [s.python, "-m", "torch.distributed.run", f"--nnodes={nodes}",
               f"--nproc-per-node={s.instance.gpus}", "--node-rank=$(NODE_RANK)",
               f"--master-addr={master_addr(s.name)}", f"--master-port={MASTER_PORT}",
               f"{SCRIPT_DIR}/{SCRIPT_NAME}", f"--data-dir={s.data_dir}", f"--steps={s.steps}", *s.extra]
    container = {
        "name": "torchrun", "image": s.image, "command": command,
        "env": [{"name": "NODE_RANK", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}}],
        "envFrom": [{"configMapRef": {"name": s.nccl_configmap}}],
        "resources": node_resources(s.instance),
        "volumeMounts": [{"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
                         {"name": "shared", "mountPath": s.mount_path},
                         {"name": "shm", "mountPath": "/dev/shm"}],
    }
    pod = {
        "subdomain": s.name, "restartPolicy": "Never",
        "tolerations": [{"key": GATE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": _pinned(s.name, s.node_names),
        "containers": [container],
        "volumes": [{"name": "script", "configMap": {"name": script_configmap_name(s.name)}},
                    {"name": "shared", "persistentVolumeClaim": {"claimName": FSX_CLAIM}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_LIMIT}}],
    }
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": s.name, **meta},
           "spec": {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes, "backoffLimit": 0,
                    "activeDeadlineSeconds": int(s.timeout_s) + DEADLINE_MARGIN_S,
                    "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
                    "template": {"metadata": {"labels": labels}, "spec": pod}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": s.name, **meta},
               "spec": {"clusterIP": "None", "selector": {JOB_LABEL: s.name}, "publishNotReadyAddresses": True,
                        "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}]}}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": script_configmap_name(s.name), **meta}, "data": {SCRIPT_NAME: s.script}}
    return SmokeObjects(job=job, service=service, configmap=configmap)


def _pinned(job: str, node_names: Sequence[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": list(node_names)}]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {JOB_LABEL: job}}, "topologyKey": HOSTNAME_LABEL}]}}


def owned_by(obj: Mapping[str, Any], job: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` owned by the created Job (its uid): the garbage collector removes it with the Job."""
    meta = job["metadata"]
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}]}}


def pod_index(pod: Mapping[str, Any]) -> int | None:
    """The completion index the Job controller gave the pod (annotation; the label from 1.28)."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(INDEX_ANNOTATION) or (meta.get("labels") or {}).get(INDEX_ANNOTATION)
    return int(raw) if raw is not None and str(raw).isdigit() else None
