"""The patrol's hold of one idle node on a Kubernetes pool, as the Job object Kueue admits, and how
to read it back: pure (plain dicts), `patrol_hold` sends and polls them.

Why a Job through Kueue, not a pod beside it: a recheck Kueue does not know about races every
workload it admits meanwhile (Kueue counts quota, not pods it did not admit). The hold is a
batch/v1 Job in the partition's operators' queue (the namespace and LocalQueue named after the
partition; teams have no RBAC there), labelled with that queue and the WorkloadPriorityClass
`gpufleet-patrol` (`queues.PATROL_PRIORITY_CLASS`: one under every other class), so any workload
Kueue weighs against it outranks it: Kueue evicts it (Workload condition Evicted, the Job suspended,
its pod deleted) and admits the real job. Its one pod:
- asks for the node's whole GPUs (and EFA devices): no pod of a real job fits beside it, so Kueue
  must preempt the hold to place one there, and while held the node's devices are the patrol's;
- is pinned to the Node (`nodeSelector` on its hostname) and tolerates none of gpufleet's taints:
  an admitted Node has none, and one that gained the gate or quarantine taint meanwhile is not to
  be rechecked (the pod stays pending, the node is not held, the patrol yields it);
- runs `sleep` in the stack's workload image (pre-pulled on every node); the light checks run on
  the node through the transport while the hold runs, as on Slurm;
- has a deadline: `activeDeadlineSeconds` and Kueue's `max-exec-time-seconds` (within the
  partition's cap, which the submission policy enforces), so a patrol that dies leaves no hold;
  `ttlSecondsAfterFinished` removes it later, `backoffLimit` 0 and `restartPolicy: Never`: a hold
  that ended is never restarted behind the patrol's back.
The admission policies admit exactly this shape (`unit_policy`: one pod of a node's GPUs at the
patrol's class; `submission_policy`: the patrol's class only in an operators' namespace).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.kubernetes.manifests import EFA, GPU, HOSTNAME_LABEL, MANAGED_BY
from gpufleet.pool.kubernetes.queues import (MAX_EXEC_LABEL, PATROL_PRIORITY_CLASS, PRIORITY_LABEL, QUEUE_LABEL,
                                             queue_layout)
from gpufleet.spec import ClusterSpec

PURPOSE = "gpufleet.io/purpose"
HOLD_LABEL = "gpufleet.io/patrol-hold"  # on the Job and its pod: the hold's name
SLOT_ANNOTATION = "gpufleet.io/slot"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # what Kueue labels a Job's Workload with
HOLD_S = 3600  # the light checks take minutes (light_commands: at most ~14 min of timeouts); release() ends it first
TTL_AFTER_FINISHED_S = 600


@dataclass(frozen=True)
class PatrolQueue:
    """Where a partition's holds go: its operators' queue (namespace = LocalQueue = partition name)."""

    partition: str
    namespace: str
    queue: str
    max_exec_seconds: int | None  # the partition's run-time cap, if any


@dataclass(frozen=True)
class PatrolJobs:
    """What every hold of a pool shares: the image, the node's devices, the queues by partition."""

    image: str
    gpus: int
    efa: int
    queues: Mapping[str, PatrolQueue]
    hold_s: int = HOLD_S

    def deadline_s(self, partition: str) -> int:
        cap = self.queues[partition].max_exec_seconds
        return min(self.hold_s, cap) if cap else self.hold_s


def patrol_jobs(spec: ClusterSpec, plan: ClusterPlan) -> PatrolJobs | None:
    """The stack's holds: its workload image, the SKU's devices, each partition's operators' queue.
    None where the stack names no workload image (nothing pre-pulled to hold a node with)."""
    image = spec.acceptance.workload_image
    if image is None:
        return None
    sku = spec.cluster.instance
    queues = {q.partition: PatrolQueue(q.partition, q.namespace, q.name, q.max_exec_seconds)
              for q in queue_layout(spec, plan, sku) if q.team is None}
    return PatrolJobs(image=image, gpus=sku.gpus, efa=sku.efa_interfaces, queues=queues)


def hold_name(slot: str, round_id: str) -> str:
    """A DNS label unique per slot and round (a slot name may hold characters a name may not)."""
    digest = hashlib.sha256(f"{slot}/{round_id}".encode()).hexdigest()[:10]
    return f"gpufleet-patrol-{digest}"


def hold_job(jobs: PatrolJobs, slot: str, partition: str, node_name: str, name: str) -> dict[str, Any]:
    q = jobs.queues[partition]
    deadline = jobs.deadline_s(partition)
    labels = {**MANAGED_BY, PURPOSE: "patrol", HOLD_LABEL: name}
    amounts: dict[str, Any] = {GPU: jobs.gpus, **({EFA: jobs.efa} if jobs.efa else {})}
    container = {"name": "hold", "image": jobs.image, "command": ["sleep", str(deadline)],
                 "resources": {"requests": dict(amounts), "limits": dict(amounts)}}
    pod = {"restartPolicy": "Never", "nodeSelector": {HOSTNAME_LABEL: node_name}, "tolerations": [],
           "terminationGracePeriodSeconds": 5, "containers": [container]}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": q.namespace, "annotations": {SLOT_ANNOTATION: slot},
                         "labels": {**labels, QUEUE_LABEL: q.queue, PRIORITY_LABEL: PATROL_PRIORITY_CLASS,
                                    MAX_EXEC_LABEL: str(deadline)}},
            "spec": {"suspend": True,  # Kueue unsuspends it once admitted
                     "parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "activeDeadlineSeconds": deadline, "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def _true(obj: Mapping[str, Any] | None, *types: str) -> bool:
    return any(c.get("type") in types and c.get("status") == "True"
               for c in ((obj or {}).get("status") or {}).get("conditions") or [])


def running_on(pods: Sequence[Mapping[str, Any]], node_name: str) -> bool:
    """A pod of the hold runs on its Node and is not leaving."""
    return any((p.get("spec") or {}).get("nodeName") == node_name and (p.get("status") or {}).get("phase") == "Running"
               and not (p.get("metadata") or {}).get("deletionTimestamp") for p in pods)


def hold_state(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], node_name: str,
               workloads: Sequence[Mapping[str, Any]] = ()) -> str:
    """"held" (admitted, its pod running on the Node), "waiting" (not admitted yet, or its pod not
    started), or "gone": the Job deleted or finished, its Workload evicted or preempted by Kueue
    (Kueue then suspends the Job and deletes its pod), the Job suspended again after admission."""
    if job is None or _true(job, "Complete", "Failed"):
        return "gone"
    if any(_true(w, "Evicted", "Preempted") for w in workloads):
        return "gone"
    if running_on(pods, node_name) and not (job.get("spec") or {}).get("suspend"):
        return "held"
    return "waiting"


def lost(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], node_name: str,
         workloads: Sequence[Mapping[str, Any]] = ()) -> bool:
    """A hold that was running and no longer is: a real job took the node (preempted, yielded)."""
    return hold_state(job, pods, node_name, workloads) != "held"
