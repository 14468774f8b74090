"""The Kubernetes pool as Pulumi components on the EKS provider (`pool.type: kubernetes`).

Only registration lives here: every object's content comes from `manifests`, `queues`,
`team_access`, the two admission policies and `chart_values` (pure), every version from `versions`. Kueue's objects wait for its chart (the chart installs
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
from gpufleet.pool.kubernetes import queues as q
from gpufleet.pool.kubernetes import versions as v
from gpufleet.pool.kubernetes.submission_policy import submission_policy
from gpufleet.pool.kubernetes.team_access import team_access
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


def _admission_policy(name: str, policy: dict[str, Any], binding: dict[str, Any], parent: pulumi.Resource,
                      ) -> tuple[pulumi.CustomResource, pulumi.CustomResource]:
    """A ValidatingAdmissionPolicy and its binding, created after the policy it names."""
    pol = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
        f"{name}-policy", metadata=policy["metadata"], spec=policy["spec"], opts=pulumi.ResourceOptions(parent=parent))
    bind = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
        f"{name}-binding", metadata=binding["metadata"], spec=binding["spec"],
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[pol]))
    return pol, bind


class Kueue(pulumi.ComponentResource):
    """Kueue from its chart, the block Topology, per partition a ResourceFlavor on its blocks, a
    WorkloadPriorityClass and a Cohort, and a ClusterQueue per queue (`queues.queue_layout`;
    LocalQueues live with their namespaces)."""

    def __init__(self, name: str, instance_type: str, queues: Sequence[q.TeamQueue], stack_cohort: str | None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:Kueue", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.release = _release(name, v.KUEUE, values.kueue_values(), child)
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.topology = _object(f"{name}-topology", m.topology(), after)
        partitions = list(q.by_partition(queues))
        self.flavors = [_object(f"{name}-flavor-{p}", m.resource_flavor(instance_type, p),
                                pulumi.ResourceOptions(parent=self, depends_on=[self.release, self.topology]))
                        for p in partitions]
        cohorts = [_object(f"{name}-cohort-{c['metadata']['name']}", c, after)
                   for c in q.cohorts(partitions, stack_cohort)]
        for pc in q.priority_classes(queues):
            _object(f"{name}-priority-{pc['metadata']['name'].removeprefix('gpufleet-')}", pc, after)
        self.cluster_queues: dict[str, pulumi.CustomResource] = {}
        for queue in queues:
            self.cluster_queues[queue.name] = _object(
                f"{name}-cq-{queue.name}", q.cluster_queue(queue, partitions, stack_cohort is not None),
                pulumi.ResourceOptions(parent=self, depends_on=[self.release, *self.flavors, *cohorts]))
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
    """A namespace with the job environment ConfigMap and the FSx claim; a queue's also has its
    LocalQueue (and a team's, the team's Role). The system namespace holds the gate MPIJobs and the
    adapter's slot ledger, outside Kueue."""

    def __init__(self, name: str, namespace: dict, instance_type: str, nccl: NcclEnv, fsx: FileSystemRef,
                 queue: q.TeamQueue | None, kueue: Kueue | None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:Namespace", name, None, opts)
        ns_name = namespace["metadata"]["name"]
        ns = _object(f"{name}-ns", namespace, pulumi.ResourceOptions(parent=self))
        inside = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        _object(f"{name}-nccl-env", m.nccl_configmap(ns_name, instance_type, nccl), inside)
        pv, pvc = m.fsx_volume(ns_name, fsx.id, fsx.dns_name, fsx.mount_name, fsx.capacity_gib)
        volume = _object(f"{name}-fsx-pv", pv, pulumi.ResourceOptions(parent=self))
        _object(f"{name}-fsx-pvc", pvc, pulumi.ResourceOptions(parent=self, depends_on=[ns, volume]))
        if queue is not None and kueue is not None:
            _object(f"{name}-lq", q.local_queue(queue),
                    pulumi.ResourceOptions(parent=self, depends_on=[ns, kueue.cluster_queues[queue.name]]))
        if queue is not None and queue.team is not None:
            for obj in team_access([queue]):
                _object(f"{name}-{obj['kind'].lower()}", obj, inside)
        self.register_outputs({"namespace": ns_name})


class WholeUnits(pulumi.ComponentResource):
    """The admission policy that holds Kueue Workloads in the partition namespaces to whole units
    placed by block (`unit_policy`), and its binding."""

    def __init__(self, name: str, topology: Topology, partitions: Sequence[str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:WholeUnits", name, None, opts)
        policy, binding = whole_unit_policy(topology, partitions)
        self.policy, self.binding = _admission_policy(name, policy, binding, self)
        self.register_outputs({"policy": policy["metadata"]["name"], "namespaces": sorted(partitions)})


class SubmitThroughQueues(pulumi.ComponentResource):
    """The admission policy that holds every Job in a queue namespace to its LocalQueue, its
    partition's priority class and run-time limit (`submission_policy`), and its binding."""

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:SubmitThroughQueues", name, None, opts)
        policy, binding = submission_policy()
        self.policy, self.binding = _admission_policy(name, policy, binding, self)
        self.register_outputs({"policy": policy["metadata"]["name"]})


class KubernetesPool(pulumi.ComponentResource):
    """Everything the pool needs inside the cluster, through the EKS component's provider."""

    def __init__(self, name: str, instance_type: str, queues: Sequence[q.TeamQueue], stack_cohort: str | None,
                 nccl: NcclEnv, fsx: FileSystemRef, provider: k8s.Provider, topology: Topology,
                 monitoring: MonitoringConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:pool:KubernetesPool", name, None,
                         pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers={"kubernetes": provider})))
        child = pulumi.ResourceOptions(parent=self)
        self.kueue = Kueue(f"{name}-kueue", instance_type, queues, stack_cohort, child)
        self.monitoring = Monitoring(f"{name}-monitoring", monitoring, child)
        self.addons = NodeAddons(f"{name}-addons", instance_type, self.monitoring.counters, child)
        PoolNamespace(f"{name}-{m.SYSTEM_NAMESPACE}", m.namespace(m.SYSTEM_NAMESPACE), instance_type, nccl, fsx,
                      None, None, child)
        for queue in queues:
            PoolNamespace(f"{name}-{queue.name}", q.namespace(queue), instance_type, nccl, fsx, queue, self.kueue, child)
        # after Kueue's chart: the policy names the Workload kind its CRDs install
        self.whole_units = WholeUnits(f"{name}-whole-units", topology, [queue.namespace for queue in queues],
                                      pulumi.ResourceOptions(parent=self, depends_on=[self.kueue.release]))
        self.submit = SubmitThroughQueues(f"{name}-submit", child)
        self.register_outputs({"namespaces": [m.SYSTEM_NAMESPACE, *(queue.namespace for queue in queues)],
                               "cohort": stack_cohort})


def pool_objects(name: str, spec: ClusterSpec, plan: ClusterPlan, storage: Storage, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None) -> KubernetesPool:
    """What `build_cluster` calls after the Eks component: queues from the plan and the stack's
    teams, the job environment from the project's BOM, the claim on the Storage component's file system."""
    sku = spec.cluster.instance
    fs = storage.file_system
    fsx = FileSystemRef(id=fs.id, dns_name=fs.dns_name, mount_name=fs.mount_name,
                        capacity_gib=m.fsx_capacity_gib(plan.storage.capacity_gib, plan.storage.needed_tib))
    bom = load_bom(resolve_bom_path(spec))
    nccl = nccl_env_for(bom, efa=sku.efa_interfaces > 0)
    stack_cohort = q.stack_cohort_name(spec) if spec.pool.kueue_cohort_borrowing else None
    return KubernetesPool(name, sku.name, q.queue_layout(spec, plan, sku), stack_cohort, nccl, fsx, provider,
                          plan.topology, monitoring_config(spec, bom, pulumi.get_stack()), opts)
