"""The Kubernetes pool's monitoring as a Pulumi component (`gpufleet:ops:Monitoring`).

Only registration lives here; every object comes from `monitoring_manifests` (pure). The
namespace is created here, before the counters ConfigMap the pool's dcgm-exporter mounts: the
exporter's release must wait for `counters` (`NodeAddons` takes it as a dependency), or its pods
would start without the file the rules need. The custom objects wait for the chart that installs
their CRDs when the stack installs one; with `ops.prometheus: existing` the CRDs are the user's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpufleet.bom import Bom
from gpufleet.gates.settings import GateSettings
from gpufleet.pool.kubernetes import monitoring_manifests as mm
from gpufleet.monitoring.rules import Thresholds, rules_document
from gpufleet.pool.kubernetes.manifests import MANAGED_BY
from gpufleet.spec import ClusterSpec, OpsConfig


@dataclass(frozen=True)
class MonitoringConfig:
    ops: OpsConfig
    rules: dict[str, Any]  # rules.rules_document for this stack
    stack: str
    dcgm_version: str


def monitoring_config(spec: ClusterSpec, bom: Bom, stack: str) -> MonitoringConfig:
    """The rules from the same thresholds the gates use (`GateSettings`) and the BOM's DCGM."""
    limit = GateSettings.from_config(spec.gates, spec.cluster.instance_type).remap_uncorrectable_limit
    t = Thresholds(spec.ops, limit, bom.components.dcgm.version, spec.storage.mount_path)
    return MonitoringConfig(spec.ops, rules_document(t, stack), stack, t.dcgm_version)


class Monitoring(pulumi.ComponentResource):
    def __init__(self, name: str, config: MonitoringConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:ops:Monitoring", name, None, opts)
        ops = config.ops
        self.namespace = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": mm.NAMESPACE, "labels": dict(MANAGED_BY)},
                                               opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        configmap, *custom = mm.monitoring_objects(ops, config.rules, config.stack, config.dcgm_version)
        self.counters = k8s.core.v1.ConfigMap(f"{name}-dcgm-counters", metadata=configmap["metadata"],
                                              data=configmap["data"], opts=in_ns)
        after: list[pulumi.Resource] = [self.namespace]
        self.release: k8s.helm.v3.Release | None = None
        if ops.prometheus == "stack":
            chart = mm.KUBE_PROMETHEUS_STACK
            self.release = k8s.helm.v3.Release(
                f"{name}-{chart.release}", name=chart.release, chart=chart.chart, version=chart.version,
                namespace=chart.namespace, repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
                values=mm.prometheus_stack_values(ops), timeout=900, opts=in_ns)
            after.append(self.release)
        self.custom = [pulumi.CustomResource(f"kubernetes:{obj['apiVersion']}:{obj['kind']}",
                                             f"{name}-{obj['metadata']['name']}", dict(obj),
                                             pulumi.ResourceOptions(parent=self, depends_on=after))
                       for obj in custom]
        self.register_outputs({
            "prometheus": ops.prometheus,
            "chart": f"{mm.KUBE_PROMETHEUS_STACK.chart} {mm.KUBE_PROMETHEUS_STACK.version}" if self.release else None,
            "alertsActOn": ops.alert_webhook_url,
            "objects": sorted(f"{o['kind']}/{o['metadata']['name']}" for o in custom),
        })
