"""Helm values for the pinned charts: pure functions, one per chart.

Why set rather than defaulted: every pod these charts run must be on a node before the gates
admit it (device plugins, DCGM, the FSx node driver: the gates need them; Kueue's webhooks
answer for every Job created, gate MPIJobs included), so each tolerates the gate taint; the
NVIDIA plugin's default affinity wants Node Feature Discovery labels that EKS nodes lack, so it
is pinned to the instance type instead.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.pool.kubernetes.monitoring_manifests import dcgm_exporter_counter_values
from gpufleet.pool.kubernetes.manifests import GPU, INSTANCE_TYPE_LABEL, gate_tolerations
from gpufleet.pool.kubernetes.queues import KUEUE_MANAGED_LABEL

KUEUE_FRAMEWORKS = ("batch/job", "kubeflow.org/mpijob")


def _instance_affinity(instance_type: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]}]}]}}}


def kueue_manager_config() -> str:
    """Kueue's Configuration: in the queue namespaces (`gpufleet.io/kueue-managed=true`) every Job is
    Kueue's, queue label or not (one without stays suspended; the submission policy refuses it
    first, saying what to add); elsewhere only labelled Jobs are, so the gates' MPIJobs and the
    smoke job in gpufleet-system, which carry none and run pinned to nodes before or outside
    admission, are left alone. Hugepages requests are not quota-counted (EFA jobs ask for them;
    no ClusterQueue covers them)."""
    return yaml.safe_dump({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"}, "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchLabels": {KUEUE_MANAGED_LABEL: "true"}},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        "resources": {"excludeResourcePrefixes": ["hugepages-"]},
    }, sort_keys=True)


def kueue_values() -> dict[str, Any]:
    return {"controllerManager": {"tolerations": gate_tolerations(),
                                  "featureGates": [{"name": "TopologyAwareScheduling", "enabled": True}]},
            "managerConfig": {"controllerManagerConfigYaml": kueue_manager_config()}}


def nvidia_device_plugin_values(instance_type: str) -> dict[str, Any]:
    return {"tolerations": [*gate_tolerations(), {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": _instance_affinity(instance_type),
            "gfd": {"enabled": False}, "nfd": {"enabled": False}}


def efa_device_plugin_values(instance_type: str) -> dict[str, Any]:
    return {"tolerations": gate_tolerations(),
            "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": [instance_type]}}


def dcgm_exporter_values(instance_type: str) -> dict[str, Any]:
    """The exporter reads gpufleet's counters file (the fields the monitoring rules need); gpufleet's
    own ServiceMonitor (gpufleet.pool.kubernetes.monitoring_manifests) scrapes it, labelled by slot."""
    return {"tolerations": gate_tolerations(), "affinity": _instance_affinity(instance_type),
            "serviceMonitor": {"enabled": False}, **dcgm_exporter_counter_values()}


def fsx_csi_values() -> dict[str, Any]:
    """The node plugin mounts Lustre on every GPU node; the controller is only needed for
    dynamic provisioning but must be schedulable on a cluster of not-yet-admitted nodes."""
    return {"node": {"tolerateAllTaints": False, "tolerations": gate_tolerations()},
            "controller": {"tolerations": gate_tolerations()}}
