"""The Kubernetes pool as Pulumi components on the EKS provider (`pool.type: kubernetes`).

Only registration lives here: every object's content comes from `manifests` and `chart_values`
(pure), every version from `versions`. Kueue's objects wait for its chart (the chart installs
the CRDs); the gate MPIJobs wait for nothing here, but the MPI operator that runs them tolerates
the gate taint like every DaemonSet, because gates run on nodes that are not admitted yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pulumi
import pulumi_kubernetes as k8s

from gpufleet.bom import load_bom, resolve_bom_path
from gpufleet.cloud.storage import Storage
from gpufleet.configure.nccl_env import NcclEnv, nccl_env_for
from gpufleet.pool.kubernetes.monitoring import Monitoring, MonitoringConfig, monitoring_config
from gpufleet.plan.model import ClusterPlan, Topology
from gpufleet.pool.kubernetes import chart_values as values
from gpufleet.pool.kubernetes import manifests as m
from gpufleet.pool.kubernetes import versions as v
from gpufleet.pool.kubernetes.unit_policy import whole_unit_policy
from gpufleet.spec import ClusterSpec


@dataclass(frozen=True)
class FileSystemRef:
    """The stack's FSx for Lustre file system, as the Storage component outputs it."""

    id: pulumi.Input[str]
    dns_name: pulumi.Input[str]
    mount_name: pulumi.Input[str]
    capacity_gib: int


def _release(name: str, chart: v.Chart, chart_values: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release:
    repo = k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo) if chart.repo else None
    return k8s.helm.v3.Release(f"{name}-{chart.release}", name=chart.release, chart=chart.chart, version=chart.version,
                               namespace=chart.namespace, create_namespace=True, repository_opts=repo,
                               values=chart_values, timeout=900, opts=opts)


def _object(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """A manifest dict as the typed resource for its kind (custom kinds through CustomResource)."""
    body = {k: val for k, val in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    kind = obj["kind"]
    if kind == "Namespace":
        return k8s.core.v1.Namespace(name, metadata=obj["metadata"], opts=opts)
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=obj["metadata"], data=body["data"], opts=opts)
    if kind == "PersistentVolume":
        return k8s.core.v1.PersistentVolume(name, metadata=obj["metadata"], spec=body["spec"], opts=opts)
    if kind == "PersistentVolumeClaim":
        return k8s.core.v1.PersistentVolumeClaim(name, metadata=obj["metadata"], spec=body["spec"], opts=opts)
    # Custom kinds: the provider takes any `kubernetes:<apiVersion>:<kind>` with the object's own
    # fields (k8s.apiextensions.CustomResource would carry `spec` only; a WorkloadPriorityClass has none)
    return pulumi.CustomResource(f"kubernetes:{obj['apiVersion']}:{kind}", name, dict(obj), opts)


class Kueue(pulumi.ComponentResource):
    """Kueue from its chart, the block Topology, one ResourceFlavor, and per partition a
    WorkloadPriorityClass and a ClusterQueue (LocalQueues live with their namespaces)."""

    def __init__(self, name: str, instance_type: str, queues: Sequence[m.PartitionQueue], cohort: str | None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:Kueue", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.release = _release(name, v.KUEUE, values.kueue_values(), child)
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.topology = _object(f"{name}-topology", m.topology(), after)
        self.flavor = _object(f"{name}-flavor", m.resource_flavor(instance_type),
                              pulumi.ResourceOptions(parent=self, depends_on=[self.release, self.topology]))
        self.cluster_queues: dict[str, pulumi.CustomResource] = {}
        for q in queues:
            _object(f"{name}-priority-{q.partition}", m.workload_priority_class(q), after)
            self.cluster_queues[q.partition] = _object(
                f"{name}-cq-{q.partition}", m.cluster_queue(q, instance_type, cohort),
                pulumi.ResourceOptions(parent=self, depends_on=[self.release, self.flavor]))
        self.register_outputs({"chartVersion": v.KUEUE.version, "clusterQueues": sorted(self.cluster_queues)})


class NodeAddons(pulumi.ComponentResource):
    """What every GPU node runs before admission: device plugins, DCGM exporter, the FSx CSI
    driver, and the MPI operator that launches the gates' multi-node runs."""

    def __init__(self, name: str, instance_type: str, dcgm_counters: pulumi.Resource,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:NodeAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.releases = [
            _release(name, v.NVIDIA_DEVICE_PLUGIN, values.nvidia_device_plugin_values(instance_type), child),
            _release(name, v.EFA_DEVICE_PLUGIN, values.efa_device_plugin_values(instance_type), child),
            # its pods mount the counters ConfigMap (gpufleet.pool.kubernetes.monitoring): it must exist first
            _release(name, v.DCGM_EXPORTER, values.dcgm_exporter_values(instance_type),
                     pulumi.ResourceOptions(parent=self, depends_on=[dcgm_counters])),
            _release(name, v.FSX_CSI_DRIVER, values.fsx_csi_values(), child),
        ]
        self.mpi_operator = k8s.yaml.v2.ConfigFile(f"{name}-{v.MPI_OPERATOR.name}", file=v.MPI_OPERATOR.url, opts=child)
        k8s.apps.v1.DeploymentPatch(
            f"{name}-{v.MPI_OPERATOR.name}-tolerations",
            metadata={"name": v.MPI_OPERATOR_DEPLOYMENT, "namespace": v.MPI_OPERATOR.namespace,
                      "annotations": {"pulumi.com/patchForce": "true"}},
            spec={"template": {"spec": {"tolerations": m.gate_tolerations()}}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.mpi_operator]))
        self.register_outputs({"charts": {r.release: r.version for r in v.CHARTS if r is not v.KUEUE},
                               "mpiOperator": v.MPI_OPERATOR.version})


class PoolNamespace(pulumi.ComponentResource):
    """A namespace with the job environment ConfigMap and the FSx claim; a partition's also has
    its LocalQueue. The system namespace holds the gate MPIJobs and the adapter's slot ledger."""

    def __init__(self, name: str, namespace: str, instance_type: str, nccl: NcclEnv, fsx: FileSystemRef,
                 queue: m.PartitionQueue | None, kueue: Kueue | None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:Namespace", name, None, opts)
        ns = _object(f"{name}-ns", m.namespace(namespace), pulumi.ResourceOptions(parent=self))
        inside = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        _object(f"{name}-nccl-env", m.nccl_configmap(namespace, instance_type, nccl), inside)
        pv, pvc = m.fsx_volume(namespace, fsx.id, fsx.dns_name, fsx.mount_name, fsx.capacity_gib)
        volume = _object(f"{name}-fsx-pv", pv, pulumi.ResourceOptions(parent=self))
        _object(f"{name}-fsx-pvc", pvc, pulumi.ResourceOptions(parent=self, depends_on=[ns, volume]))
        if queue is not None and kueue is not None:
            _object(f"{name}-lq", m.local_queue(queue),
                    pulumi.ResourceOptions(parent=self, depends_on=[ns, kueue.cluster_queues[queue.partition]]))
        self.register_outputs({"namespace": namespace})


class WholeUnits(pulumi.ComponentResource):
    """The admission policy that holds Kueue Workloads in the partition namespaces to whole units
    placed by block (`unit_policy`), and its binding."""

    def __init__(self, name: str, topology: Topology, partitions: Sequence[str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:WholeUnits", name, None, opts)
        policy, binding = whole_unit_policy(topology, partitions)
        self.policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy", metadata=policy["metadata"], spec=policy["spec"], opts=pulumi.ResourceOptions(parent=self))
        self.binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-binding", metadata=binding["metadata"], spec=binding["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.policy]))
        self.register_outputs({"policy": policy["metadata"]["name"], "namespaces": sorted(partitions)})


class KubernetesPool(pulumi.ComponentResource):
    """Everything the pool needs inside the cluster, through the EKS component's provider."""

    def __init__(self, name: str, instance_type: str, queues: Sequence[m.PartitionQueue], cohort: str | None,
                 nccl: NcclEnv, fsx: FileSystemRef, provider: k8s.Provider, topology: Topology,
                 monitoring: MonitoringConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:KubernetesPool", name, None,
                         pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers={"kubernetes": provider})))
        child = pulumi.ResourceOptions(parent=self)
        self.kueue = Kueue(f"{name}-kueue", instance_type, queues, cohort, child)
        self.monitoring = Monitoring(f"{name}-monitoring", monitoring, child)
        self.addons = NodeAddons(f"{name}-addons", instance_type, self.monitoring.counters, child)
        PoolNamespace(f"{name}-{m.SYSTEM_NAMESPACE}", m.SYSTEM_NAMESPACE, instance_type, nccl, fsx, None, None, child)
        for q in queues:
            PoolNamespace(f"{name}-{q.partition}", q.namespace, instance_type, nccl, fsx, q, self.kueue, child)
        # after Kueue's chart: the policy names the Workload kind its CRDs install
        self.whole_units = WholeUnits(f"{name}-whole-units", topology, [q.namespace for q in queues],
                                      pulumi.ResourceOptions(parent=self, depends_on=[self.kueue.release]))
        self.register_outputs({"namespaces": [m.SYSTEM_NAMESPACE, *(q.namespace for q in queues)],
                               "cohort": cohort})


def pool_objects(name: str, spec: ClusterSpec, plan: ClusterPlan, storage: Storage, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None) -> KubernetesPool:
    """What `build_cluster` calls after the Eks component: queues from the plan, the job
    environment from the project's BOM, the claim on the Storage component's file system."""
    sku = spec.cluster.instance
    fs = storage.file_system
    fsx = FileSystemRef(id=fs.id, dns_name=fs.dns_name, mount_name=fs.mount_name,
                        capacity_gib=m.fsx_capacity_gib(plan.storage.capacity_gib, plan.storage.needed_tib))
    bom = load_bom(resolve_bom_path(spec))
    nccl = nccl_env_for(bom, efa=sku.efa_interfaces > 0)
    cohort = f"{spec.cluster.name}-gpus" if spec.pool.kueue_cohort_borrowing else None
    return KubernetesPool(name, sku.name, m.partition_queues(plan, sku), cohort, nccl, fsx, provider,
                          plan.topology, monitoring_config(spec, bom, pulumi.get_stack()), opts)
