"""A pool slot on a Kubernetes Node object: read it, and the merge patch that makes it say a state.

Pure (plain dicts in, plain dicts out). The encoding (DESIGN.md section 5):
- the slot is the `gpufleet.io/slot` label the kubelet registers with (nodeadm NodeConfig in
  `gpufleet.cloud.userdata`); node names are EC2 private DNS names, so they are never the slot;
- pending: taint `gpufleet.io/gate=pending:NoSchedule` (the kubelet already registers with it);
- admitted: no gpufleet taint; labels `node-restriction.kubernetes.io/gpufleet-partition` and
  `...-block` (a kubelet cannot set those on itself), the record's digest and summary annotated;
- quarantined / blacklisted: taint `gpufleet.io/quarantine=<code>:NoExecute`, cordoned, the free
  text in an annotation;
- `gpufleet.io/state` says which, `gpufleet.io/failures` counts failures; a node without a state
  annotation is not (or no longer) in the pool.
Taints are one list replaced whole by a merge patch, so every patch carries the resourceVersion
it was computed from: a concurrent change makes the server answer 409 instead of losing it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gpufleet.errors import PoolError
from gpufleet.pool.protocol import (BLOCK_LABEL, GATE_TAINT, PARTITION_LABEL, PENDING_TAINT_VALUE, QUARANTINE_TAINT,
                                 Holder, NodeState, PoolNode)

SLOT_LABEL = "gpufleet.io/slot"
STATE = "gpufleet.io/state"
FAILURES = "gpufleet.io/failures"
PARTITION = "gpufleet.io/partition"
BLOCK = "gpufleet.io/block"
INSTANCE = "gpufleet.io/instance-id"
DIGEST = "gpufleet.io/admission-digest"
SUMMARY = "gpufleet.io/admission-summary"
REASON_CODE = "gpufleet.io/reason-code"
REASON = "gpufleet.io/quarantine-reason"
ANNOTATIONS = (STATE, FAILURES, PARTITION, BLOCK, INSTANCE, DIGEST, SUMMARY, REASON_CODE, REASON)
LABELS = (PARTITION_LABEL, BLOCK_LABEL)
MANAGED_TAINTS = (GATE_TAINT, QUARANTINE_TAINT)
KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"
CORDONED = "cordoned"  # the reason code of an admitted Node someone cordoned by hand
GATE = {"key": GATE_TAINT, "value": PENDING_TAINT_VALUE, "effect": "NoSchedule"}


def slot_of(node: Mapping[str, Any]) -> str | None:
    return (node.get("metadata", {}).get("labels") or {}).get(SLOT_LABEL)


def node_name(node: Mapping[str, Any]) -> str:
    return node["metadata"]["name"]


def instance_from_provider_id(provider_id: str | None) -> str | None:
    """`aws:///us-east-2a/i-0abc...` -> `i-0abc...` (the EC2 cloud provider's format)."""
    if not provider_id or "/" not in provider_id:
        return None
    last = provider_id.rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


def decode(node: Mapping[str, Any]) -> PoolNode | None:
    """The pool's view of a Node, or None when gpufleet has not registered it (no state annotation)."""
    meta = node.get("metadata", {})
    notes = meta.get("annotations") or {}
    slot = slot_of(node)
    if slot is None or STATE not in notes:
        return None
    try:
        state, block, failures = NodeState(notes[STATE]), notes.get(BLOCK), int(notes.get(FAILURES, "0"))
        block_id = int(block) if block is not None else None
    except ValueError as exc:  # someone edited the annotations by hand
        raise PoolError(f"Node {meta.get('name')} has unreadable gpufleet annotations ({exc}); fix or remove "
                        f"them (`kubectl annotate node {meta.get('name')} {STATE}-`)", node=slot) from None
    code, reason = notes.get(REASON_CODE), notes.get(REASON)
    if state is NodeState.ADMITTED and (node.get("spec") or {}).get("unschedulable"):
        # cordoned outside gpufleet (gpufleet cordons only the nodes it quarantines or drains): the node
        # takes no work, so the pool says so; only the re-admission gate puts it back (issue 22)
        state, code, reason = NodeState.QUARANTINED, CORDONED, "cordoned outside gpufleet (kubectl cordon)"
    return PoolNode(slot=slot, state=state, block=block_id, partition=notes.get(PARTITION),
                    instance_id=notes.get(INSTANCE) or instance_from_provider_id((node.get("spec") or {}).get("providerID")),
                    reason_code=code, reason=reason, record_digest=notes.get(DIGEST),
                    failures=failures)


def desired_annotations(new: PoolNode | None, summary: str | None) -> dict[str, str | None]:
    """Every gpufleet annotation: its value, or None to remove it (a released node keeps none)."""
    if new is None:
        return dict.fromkeys(ANNOTATIONS)
    return {STATE: new.state.value, FAILURES: str(new.failures), PARTITION: new.partition,
            BLOCK: str(new.block) if new.block is not None else None, INSTANCE: new.instance_id,
            DIGEST: new.record_digest, SUMMARY: summary if new.state is NodeState.ADMITTED else None,
            REASON_CODE: new.reason_code, REASON: new.reason}


def desired_labels(new: PoolNode | None) -> dict[str, str | None]:
    if new is None or new.state is not NodeState.ADMITTED:
        return dict.fromkeys(LABELS)
    return {PARTITION_LABEL: new.partition, BLOCK_LABEL: str(new.block) if new.block is not None else None}


def desired_taints(current: list[dict[str, Any]], new: PoolNode | None) -> list[dict[str, Any]]:
    """Other owners' taints stay as they are; gpufleet's say the state (a released node is gated)."""
    kept = [t for t in current if t.get("key") not in MANAGED_TAINTS]
    if new is None or new.state is NodeState.PENDING:
        return kept + [dict(GATE)]
    if new.state is NodeState.ADMITTED:
        return kept
    return kept + [{"key": QUARANTINE_TAINT, "value": new.reason_code, "effect": "NoExecute"}]


def holds_gpus(pod: Mapping[str, Any]) -> str | None:
    """The Node a pod occupies with GPUs (requests or limits of `nvidia.com/gpu` > 0), else None.

    DaemonSet pods (device plugins, DCGM) ask for no GPU, so they never make a node busy."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return None
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if int(str((res.get(kind) or {}).get("nvidia.com/gpu", "0")) or 0) > 0:
                return node
    return None


def workload_of(pod: Mapping[str, Any]) -> str:
    """Who a pod works for, as `<namespace>/<Kind>/<name>`: its Kueue Workload (the
    `kueue.x-k8s.io/workload` annotation or label Kueue puts on the pods it admits), else its
    controlling owner (Job, MPIJob, ...), else the pod itself."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace", "")
    kueue = (meta.get("annotations") or {}).get(KUEUE_WORKLOAD) or (meta.get("labels") or {}).get(KUEUE_WORKLOAD)
    if kueue:
        return f"{ns}/Workload/{kueue}"
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner is not None:
        return f"{ns}/{owner['kind']}/{owner['name']}"
    return f"{ns}/Pod/{meta.get('name', '')}"


def holders(slot: str, pods: Sequence[Mapping[str, Any]]) -> list[Holder]:
    """The work holding a slot's GPUs: its GPU pods grouped by what they work for, in name order."""
    by_workload: dict[str, list[str]] = {}
    for pod in pods:
        if holds_gpus(pod):
            meta = pod["metadata"]
            by_workload.setdefault(workload_of(pod), []).append(f"{meta.get('namespace', '')}/{meta['name']}")
    return [Holder(slot=slot, workload=w, pods=tuple(sorted(p))) for w, p in sorted(by_workload.items())]


def leaving(pod: Mapping[str, Any]) -> bool:
    """Already being deleted (evicted or deleted): it still holds its GPUs until it is gone."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _same_taints(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    def key(t: Mapping[str, Any]) -> tuple[str, str, str]:
        return (t.get("key", ""), t.get("value", ""), t.get("effect", ""))
    return sorted(map(key, a)) == sorted(map(key, b))


def patch_for(node: Mapping[str, Any], new: PoolNode | None, summary: str | None = None,
              cordon: bool | None = None) -> dict[str, Any] | None:
    """The JSON merge patch that makes `node` say `new` (None: released), or None when it already does.

    `cordon`: None derives it (quarantined and blacklisted nodes are cordoned, others uncordoned).
    """
    meta = node.get("metadata", {})
    spec = node.get("spec") or {}
    patch_meta: dict[str, Any] = {}
    for field, want in (("annotations", desired_annotations(new, summary)), ("labels", desired_labels(new))):
        have = meta.get(field) or {}
        diff = {k: v for k, v in want.items() if have.get(k) != v}
        if diff:
            patch_meta[field] = diff
    patch_spec: dict[str, Any] = {}
    taints = desired_taints(list(spec.get("taints") or []), new)
    if not _same_taints(taints, list(spec.get("taints") or [])):
        patch_spec["taints"] = taints
    if cordon is None:
        cordon = new is not None and new.state in (NodeState.QUARANTINED, NodeState.BLACKLISTED)
    if bool(spec.get("unschedulable", False)) != cordon:
        patch_spec["unschedulable"] = cordon
    if not patch_meta and not patch_spec:
        return None
    patch: dict[str, Any] = {"metadata": {**patch_meta, "resourceVersion": meta["resourceVersion"]}}
    if patch_spec:
        patch["spec"] = patch_spec
    return patch
