"""The Kubernetes pool's monitoring as plain manifests: pure, so the component only registers them
and the tests validate each against its CRD schema.

What a Kubernetes stack gets (`gpufleet:ops.prometheus`):
- always: the dcgm-exporter counters ConfigMap (`monitoring_counters.deployed_csv`, mounted into
  the pool's dcgm-exporter chart by `dcgm_exporter_counter_values`), a ServiceMonitor for the DCGM
  exporter and one for node_exporter, and the generated rules as a PrometheusRule;
- `stack` (default): the pinned kube-prometheus-stack chart, whose Prometheus selects every
  ServiceMonitor and PrometheusRule (not only its own release's), whose node_exporter tolerates
  the gate and quarantine taints (a pending node is watched too) and whose Alertmanager routes
  to `gpufleet ops serve` when `ops.alertWebhookUrl` is set;
- `existing`: nothing but the objects above, labelled with `ops.prometheusRuleLabels` so the
  user's Prometheus (its ruleSelector and serviceMonitorSelector) picks them up.

Why the ServiceMonitors relabel: every rule groups by `node`, the pool slot; a Kubernetes node
carries its slot as the `gpufleet.io/slot` label, which Prometheus sees once the ServiceMonitor
asks for node metadata (`attachMetadata.node`, Prometheus >= 2.37). The `job` label is set to the
job names the rules match (`dcgm-exporter`, `node-exporter`), whatever the Services are called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from infra.ops import metrics as mx
from infra.ops import monitoring_counters
from infra.ops.rules import NODE_LABEL
from infra.ops.scrape import alertmanager_config, prometheus_rule
from infra.pool.kubernetes import versions as v
from infra.pool.kubernetes.manifests import MANAGED_BY, gate_tolerations
from infra.pool.kubernetes.nodes import SLOT_LABEL
from infra.spec import OpsConfig

NAMESPACE = v.DCGM_EXPORTER.namespace
COUNTERS_CONFIGMAP = "gpufleet-dcgm-counters"
COUNTERS_FILE = "dcgm-counters.csv"
COUNTERS_DIR = "/etc/gpufleet"
MONITORING_API = "monitoring.coreos.com/v1"

KUBE_PROMETHEUS_STACK = v.Chart(
    release="kube-prometheus-stack", chart="kube-prometheus-stack", version="62.5.0", namespace=NAMESPACE,
    repo="https://prometheus-community.github.io/helm-charts",
    source="prometheus-community/helm-charts charts/kube-prometheus-stack 62.5.0 (appVersion v0.76.1: "
           "Chart.yaml at commit 3e554083971e3161cc8c73e82fd25bcca7784584)")


@dataclass(frozen=True)
class ExporterService:
    """How a ServiceMonitor finds an exporter's Service: its labels, port name and namespaces."""

    job: str
    match_labels: Mapping[str, str]
    port: str
    namespaces: tuple[str, ...] | None  # None: any namespace


# The dcgm-exporter chart's Service (templates/service.yaml: selector labels of the release, port
# "metrics"); the prometheus-node-exporter chart's Service (port "http-metrics"), as
# kube-prometheus-stack installs it or a user's own release of that chart.
DCGM_SERVICE = ExporterService(mx.DCGM_JOB, {"app.kubernetes.io/name": "dcgm-exporter",
                                             "app.kubernetes.io/instance": v.DCGM_EXPORTER.release},
                               "metrics", (NAMESPACE,))
NODE_EXPORTER_SERVICE = ExporterService(mx.NODE_JOB, {"app.kubernetes.io/name": "prometheus-node-exporter"},
                                        "http-metrics", None)


def _slot_label() -> str:
    """Prometheus's name for a node label: every character outside [A-Za-z0-9_] becomes `_`."""
    return "__meta_kubernetes_node_label_" + "".join(c if c.isalnum() or c == "_" else "_" for c in SLOT_LABEL)


def counters_configmap(dcgm_version: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": COUNTERS_CONFIGMAP, "namespace": NAMESPACE, "labels": dict(MANAGED_BY)},
            "data": {COUNTERS_FILE: monitoring_counters.deployed_csv(dcgm_version)}}


def dcgm_exporter_counter_values() -> dict[str, Any]:
    """The dcgm-exporter chart values (`arguments`, `extraConfigMapVolumes`, `extraVolumeMounts`)
    that make the exporter read gpufleet's counters file instead of its image's default."""
    return {"arguments": ["-f", f"{COUNTERS_DIR}/{COUNTERS_FILE}"],
            "extraConfigMapVolumes": [{"name": COUNTERS_CONFIGMAP, "configMap": {"name": COUNTERS_CONFIGMAP}}],
            "extraVolumeMounts": [{"name": COUNTERS_CONFIGMAP, "mountPath": COUNTERS_DIR, "readOnly": True}]}


def service_monitor(svc: ExporterService, labels: Mapping[str, str], interval_s: int = 30) -> dict[str, Any]:
    namespaces: dict[str, Any] = {"any": True} if svc.namespaces is None else {"matchNames": list(svc.namespaces)}
    relabel = [
        {"action": "replace", "sourceLabels": [_slot_label()], "targetLabel": NODE_LABEL},
        {"action": "drop", "sourceLabels": [NODE_LABEL], "regex": ""},  # not a pool node: not gpufleet's
        {"action": "replace", "replacement": svc.job, "targetLabel": "job"},
    ]
    return {"apiVersion": MONITORING_API, "kind": "ServiceMonitor",
            "metadata": {"name": f"gpufleet-{svc.job}", "namespace": NAMESPACE, "labels": {**MANAGED_BY, **labels}},
            "spec": {"attachMetadata": {"node": True}, "namespaceSelector": namespaces,
                     "selector": {"matchLabels": dict(svc.match_labels)},
                     "endpoints": [{"port": svc.port, "interval": f"{interval_s}s", "relabelings": relabel}]}}


def prometheus_stack_values(ops: OpsConfig) -> dict[str, Any]:
    """kube-prometheus-stack: select every ServiceMonitor and rule, node_exporter on every node
    (gated ones too) scraped by gpufleet's ServiceMonitor only, Alertmanager to `ops serve`."""
    values: dict[str, Any] = {
        "prometheus": {"prometheusSpec": {"serviceMonitorSelectorNilUsesHelmValues": False,
                                          "ruleSelectorNilUsesHelmValues": False,
                                          "podMonitorSelectorNilUsesHelmValues": False}},
        "prometheus-node-exporter": {"tolerations": gate_tolerations(), "prometheus": {"monitor": {"enabled": False}}},
        "grafana": {"enabled": False},  # gpufleet's reports are its own; a dashboard is the user's choice
    }
    if ops.alert_webhook_url is not None:
        values["alertmanager"] = {"config": alertmanager_config(ops.alert_webhook_url)}
    return values


def monitoring_objects(ops: OpsConfig, rules: dict[str, Any], stack: str, dcgm_version: str) -> list[dict[str, Any]]:
    """The custom and core objects (the chart, when `stack`, is the component's)."""
    labels = dict(ops.prometheus_rule_labels)
    rule = prometheus_rule(rules, stack, NAMESPACE)
    rule["metadata"]["labels"] = {**rule["metadata"]["labels"], **labels}
    return [counters_configmap(dcgm_version), service_monitor(DCGM_SERVICE, labels),
            service_monitor(NODE_EXPORTER_SERVICE, labels), rule]
