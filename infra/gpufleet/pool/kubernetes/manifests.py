"""The Kubernetes pool's objects as plain manifests, derived from the spec, the plan and the BOM.

Pure functions (no Pulumi, no I/O), so the component only registers what these return and the
tests can validate each object against its CRD schema. Why these shapes (DESIGN.md sections 5, 9):
- a `ResourceFlavor` per partition whose node labels are the instance type and the partition label
  the adapter sets at admission (a node's partition is the plan's owner of its block), with
  `topologyName`, and a `Topology` whose levels are the admission block label then the hostname:
  a partition's workloads land only on its own blocks, and Kueue's topology-aware scheduling packs
  each into one block, without a flavor per block;
- the block and partition levels are `node-restriction.kubernetes.io/` labels (a kubelet cannot
  set them on itself), so a node that has not passed its gates is in no block and no flavor;
- ClusterQueues, cohorts and namespaces per partition and team: `gpufleet.pool.kubernetes.queues`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpufleet.catalog import InstanceType
from gpufleet.configure.nccl_env import NcclEnv
from gpufleet.errors import ConfigError
from gpufleet.plan.model import ClusterPlan, PartitionAllocation
from gpufleet.pool.kubernetes.versions import KUEUE_API_VERSION
from gpufleet.pool.protocol import BLOCK_LABEL, GATE_TAINT, PARTITION_LABEL, QUARANTINE_TAINT

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
HOSTNAME_LABEL = "kubernetes.io/hostname"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
SYSTEM_NAMESPACE = "gpufleet-system"  # gate MPIJobs, the slot ledger
TOPOLOGY = "gpufleet-blocks"
FSX_CLAIM = "fsx"
FSX_DRIVER = "fsx.csi.aws.com"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
RESERVED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", SYSTEM_NAMESPACE})


def gate_tolerations() -> list[dict[str, str]]:
    """What every pod that must run on a node before (or without) admission tolerates.

    The gate taint (NoSchedule) keeps work off pending nodes; the quarantine taint (NoExecute)
    evicts work from bad nodes. Device plugins, the DCGM exporter and the storage driver are not
    work: they must run on pending nodes for the gates, and stay on quarantined ones for diagnosis.
    """
    return [{"key": GATE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
            {"key": QUARANTINE_TAINT, "operator": "Exists", "effect": "NoExecute"}]


def flavor_name(instance_type: str) -> str:
    return instance_type.replace(".", "-")


def nccl_configmap_name(instance_type: str) -> str:
    return f"nccl-env-{flavor_name(instance_type)}"


def priority_class_name(partition: str) -> str:
    return f"gpufleet-{partition}"


@dataclass(frozen=True)
class PartitionQueue:
    """One partition's queue: its namespace and what its ClusterQueue may use."""

    partition: str
    priority: int
    gpus: int
    cpu: int
    memory_gib: int
    efa: int

    @property
    def namespace(self) -> str:
        return self.partition


def partition_queue(alloc: PartitionAllocation, unit_gpus: int, sku: InstanceType) -> PartitionQueue:
    """The quota is the partition's `quotaUnits` when set (the planner checks they fit the cluster),
    else its allocated units; CPU, memory and EFA devices follow as the node's share per GPU."""
    if alloc.name in RESERVED_NAMESPACES:
        raise ConfigError(f"partition name {alloc.name!r} is a reserved Kubernetes namespace",
                          field="gpufleet:partitions", expected="a name other than " + ", ".join(sorted(RESERVED_NAMESPACES)))
    units = alloc.quota_units if alloc.quota_units is not None else alloc.units
    gpus = units * unit_gpus
    return PartitionQueue(partition=alloc.name, priority=alloc.priority, gpus=gpus,
                          cpu=math.ceil(gpus * sku.vcpus / sku.gpus),
                          memory_gib=math.ceil(gpus * sku.memory_gib / sku.gpus),
                          efa=math.ceil(gpus * sku.efa_interfaces / sku.gpus))


def partition_queues(plan: ClusterPlan, sku: InstanceType) -> list[PartitionQueue]:
    return [partition_queue(a, plan.topology.unit_gpus, sku) for a in plan.partitions]


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(MANAGED_BY)}}


def topology() -> dict[str, Any]:
    return {"apiVersion": KUEUE_API_VERSION, "kind": "Topology",
            "metadata": {"name": TOPOLOGY, "labels": dict(MANAGED_BY)},
            "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": HOSTNAME_LABEL}]}}


def partition_flavor_name(partition: str, instance_type: str) -> str:
    return f"{partition}-{flavor_name(instance_type)}"


def resource_flavor(instance_type: str, partition: str) -> dict[str, Any]:
    """The partition's nodes: Kueue adds the node labels to every admitted pod's node selector, so a
    workload admitted on this flavor can only run on the blocks the plan gave the partition."""
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
            "metadata": {"name": partition_flavor_name(partition, instance_type), "labels": dict(MANAGED_BY)},
            "spec": {"nodeLabels": {INSTANCE_TYPE_LABEL: instance_type, PARTITION_LABEL: partition},
                     "topologyName": TOPOLOGY}}


def workload_priority_class(queue: PartitionQueue) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
            "metadata": {"name": priority_class_name(queue.partition), "labels": dict(MANAGED_BY)},
            "value": queue.priority,
            "description": f"gpufleet partition {queue.partition} (gpufleet:partitions priority)"}


def nccl_configmap(ns: str, instance_type: str, env: NcclEnv) -> dict[str, Any]:
    """The job environment of `nccl_env_for(bom)`; pods take it with `envFrom: configMapRef`."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": nccl_configmap_name(instance_type), "namespace": ns,
                         "labels": {**MANAGED_BY, INSTANCE_TYPE_LABEL: instance_type}},
            "data": dict(env.job_env)}


def fsx_volume(ns: str, file_system_id: Any, dns_name: Any, mount_name: Any, capacity_gib: int) -> tuple[dict, dict]:
    """A static PersistentVolume on the stack's FSx for Lustre file system and the claim bound to it.

    One pair per namespace: a PV binds exactly one claim, and the file system is shared, so each
    namespace gets its own PV with the same volume handle (the file system id).
    """
    pv_name = f"fsx-{ns}"
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": pv_name, "labels": dict(MANAGED_BY)},
          "spec": {"capacity": {"storage": f"{capacity_gib}Gi"}, "volumeMode": "Filesystem",
                   "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
                   "storageClassName": "", "mountOptions": ["flock"],
                   "claimRef": {"namespace": ns, "name": FSX_CLAIM},
                   "csi": {"driver": FSX_DRIVER, "volumeHandle": file_system_id,
                           "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": FSX_CLAIM, "namespace": ns, "labels": dict(MANAGED_BY)},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                    "resources": {"requests": {"storage": f"{capacity_gib}Gi"}}}}
    return pv, pvc


def fsx_capacity_gib(capacity_gib: int | None, needed_tib: float) -> int:
    """A PV must state a size; an elastic (Intelligent-Tiering) file system has none, so use what
    the plan needs. Kubernetes does not enforce it for CSI volumes; it only matches the claim."""
    return capacity_gib if capacity_gib is not None else max(1, math.ceil(needed_tib * 1024))
