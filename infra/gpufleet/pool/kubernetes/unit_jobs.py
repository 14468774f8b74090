"""How to submit unit jobs to a Kubernetes pool, as the Job objects themselves: one per seed mode.

Pure (no client): `gpufleet` documents these shapes and the tests hold them to the pool's own
admission policies (the submission policy on the Job, the whole-unit policy on the Workload Kueue
makes of it), so what the README tells a user to submit is exactly what the cluster admits.
- one job over all units (data parallel across units, model parallel inside): one Indexed Job of
  every unit's pods; up to a block it asks for one block (`podset-required-topology`), beyond it
  for slices of one unit each inside a block (`podset-slice-required-topology` + slice size);
- N independent unit jobs: N Jobs of one unit, each inside one block;
- prefill/decode pools: one Job per inference partition, each a whole number of units on its own
  partition's blocks (the partition's flavor), sliced by unit like the first mode.
A pod takes gcd(unit GPUs, node GPUs) GPUs, the largest pod size that both divides a node and
tiles a unit (10-GPU units on 8-GPU nodes: 5 pods of 2 GPUs), and the same share of EFA devices.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import yaml

from gpufleet.errors import ConfigError
from gpufleet.plan.model import ClusterPlan, Topology
from gpufleet.pool.kubernetes.manifests import EFA, FSX_CLAIM, GPU, nccl_configmap_name
from gpufleet.pool.kubernetes.queues import TeamQueue, queue_layout, submission_labels
from gpufleet.pool.kubernetes.unit_policy import REQUIRED_ANNOTATION, SLICE_ANNOTATION, SLICE_SIZE_ANNOTATION
from gpufleet.pool.protocol import BLOCK_LABEL
from gpufleet.spec import ClusterSpec


def pod_gpus(t: Topology) -> int:
    return math.gcd(t.unit_gpus, t.gpus_per_node)


def pods_per_unit(t: Topology) -> int:
    return t.unit_gpus // pod_gpus(t)


def unit_job(name: str, queue: TeamQueue, t: Topology, units: int, image: str, command: Sequence[str],
             mount_path: str) -> dict[str, Any]:
    """An Indexed Job of `units` whole units in `queue`, placed by block."""
    if units < 1:
        raise ValueError(f"a unit job takes one unit or more, not {units}")
    per_pod = pod_gpus(t)
    pods = units * pods_per_unit(t)
    if units * t.unit_gpus <= t.block_gpus:
        placement = {REQUIRED_ANNOTATION: BLOCK_LABEL}
    else:
        placement = {SLICE_ANNOTATION: BLOCK_LABEL, SLICE_SIZE_ANNOTATION: str(pods_per_unit(t))}
    efa = queue.sku.efa_interfaces * per_pod // queue.sku.gpus
    amounts: dict[str, Any] = {GPU: per_pod, **({EFA: efa} if efa else {})}
    container = {"name": "unit", "image": image, "command": list(command),
                 "envFrom": [{"configMapRef": {"name": nccl_configmap_name(queue.sku.name)}}],
                 "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                 "volumeMounts": [{"name": "shared", "mountPath": mount_path}]}
    template = {"metadata": {"annotations": placement},
                "spec": {"restartPolicy": "Never", "containers": [container],
                         "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": FSX_CLAIM}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": queue.namespace, "labels": submission_labels(queue)},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 0,
                     "template": template}}


def all_units_job(queue: TeamQueue, t: Topology, image: str, command: Sequence[str], mount_path: str,
                  units: int | None = None) -> dict[str, Any]:
    """Seed mode one: one job over all the queue's units (its nominal quota unless `units`)."""
    return unit_job(f"{queue.name}-all-units", queue, t, units or queue.units, image, command, mount_path)


def independent_unit_jobs(queue: TeamQueue, t: Topology, count: int, image: str, command: Sequence[str],
                          mount_path: str) -> list[dict[str, Any]]:
    """Seed mode two: `count` jobs of one unit each."""
    return [unit_job(f"{queue.name}-unit-{i}", queue, t, 1, image, command, mount_path) for i in range(count)]


def serving_pool_jobs(prefill: TeamQueue, decode: TeamQueue, t: Topology, image: str,
                      prefill_command: Sequence[str], decode_command: Sequence[str],
                      mount_path: str) -> list[dict[str, Any]]:
    """Seed mode three: a prefill pool and a decode pool, each over its partition's units."""
    return [unit_job(f"{prefill.name}-pool", prefill, t, prefill.units, image, prefill_command, mount_path),
            unit_job(f"{decode.name}-pool", decode, t, decode.units, image, decode_command, mount_path)]


def documented_jobs(queues: Sequence[TeamQueue], modes: dict[str, str], t: Topology, image: str,
                    command: Sequence[str], mount_path: str, independent: int = 2) -> list[dict[str, Any]]:
    """The unit jobs `render` prints for a Kubernetes stack, per queue with quota by its
    partition's mode (`modes`: partition -> mode): data-parallel, one job over all the queue's
    units; independent and interactive, `independent` one-unit jobs (at most its units); a prefill
    and a decode partition, their pools, paired by team (or both the operators')."""
    out: list[dict[str, Any]] = []
    with_quota = [x for x in queues if x.units > 0]
    for x in with_quota:
        mode = modes[x.partition]
        if mode == "data-parallel":
            out.append(all_units_job(x, t, image, command, mount_path))
        elif mode in ("independent", "interactive"):
            out += independent_unit_jobs(x, t, min(independent, x.units), image, command, mount_path)
    prefill = [x for x in with_quota if modes[x.partition] == "inference-prefill"]
    decode = [x for x in with_quota if modes[x.partition] == "inference-decode"]
    for p in prefill:
        d = next((x for x in decode if x.team == p.team), None)
        if d is not None:
            out += serving_pool_jobs(p, d, t, image, command, command, mount_path)
    return out


def render(spec: ClusterSpec, plan: ClusterPlan) -> str:
    """`gpufleet pool units` on a Kubernetes stack: the documented jobs as YAML, with the stack's
    workload image and `hostname` as the command (the `srun hostname` of the Slurm examples)."""
    image = spec.acceptance.workload_image
    if image is None:
        raise ConfigError("the unit job examples run the stack's workload image, and it names none",
                          field="gpufleet:acceptance.workloadImage", expected="an image reference pinned by digest")
    queues = queue_layout(spec, plan, spec.cluster.instance)
    jobs = documented_jobs(queues, {p.name: p.mode for p in plan.partitions}, plan.topology, image, ["hostname"],
                           spec.storage.mount_path)
    head = (f"# {spec.cluster.name}: unit jobs for its Kueue queues (kubectl apply -f -). A Job in a queue namespace\n"
            f"# names that namespace's LocalQueue, its partition's priority class and, where capped, a run time;\n"
            f"# a pod takes {pod_gpus(plan.topology)} GPUs, a unit is {pods_per_unit(plan.topology)} pods.\n")
    return head + yaml.safe_dump_all(jobs, sort_keys=False)
