"""The Kubernetes pool's monitoring as plain manifests: pure, so the component only registers them
and the tests validate each against its CRD schema.

What a Kubernetes stack gets (`gpufleet:ops.prometheus`):
- always: the dcgm-exporter counters ConfigMap (`monitoring_counters.deployed_csv`, mounted into
  the pool's dcgm-exporter chart by `dcgm_exporter_counter_values`), a ServiceMonitor for the DCGM
  exporter and one for node_exporter, and the generated rules as a PrometheusRule;
- when `ops.alertWebhookUrl` is set: a ScrapeConfig for `gpufleet ops serve`'s /metrics (see
  `ops_serve_scrape_config`), without which the utilisation and memory rules never fire;
- `stack` (default): the pinned kube-prometheus-stack chart, whose Prometheus selects every
  ServiceMonitor, ScrapeConfig and PrometheusRule (not only its own release's), whose node_exporter tolerates
  the gate and quarantine taints (a pending node is watched too) and whose Alertmanager routes
  to `gpufleet ops serve` when `ops.alertWebhookUrl` is set;
- `existing`: nothing but the objects above, labelled with `ops.prometheusRuleLabels` so the
  user's Prometheus (its ruleSelector, serviceMonitorSelector and scrapeConfigSelector) picks them up.

Why the ServiceMonitors relabel: every rule groups by `node`, the pool slot; a Kubernetes node
carries its slot as the `gpufleet.io/slot` label, which Prometheus sees once the ServiceMonitor
asks for node metadata (`attachMetadata.node`, Prometheus >= 2.37). The `job` label is set to the
job names the rules match (`dcgm-exporter`, `node-exporter`), whatever the Services are called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from gpufleet.errors import ConfigError
from gpufleet.monitoring import metrics as mx
from gpufleet.monitoring import counters as monitoring_counters
from gpufleet.monitoring.rules import NODE_LABEL
from gpufleet.monitoring.scrape import alertmanager_config, prometheus_rule
from gpufleet.pool.kubernetes import versions as v
from gpufleet.pool.kubernetes.manifests import MANAGED_BY, gate_tolerations
from gpufleet.pool.kubernetes.nodes import SLOT_LABEL
from gpufleet.spec import OpsConfig

NAMESPACE = v.DCGM_EXPORTER.namespace
COUNTERS_CONFIGMAP = "gpufleet-dcgm-counters"
COUNTERS_FILE = "dcgm-counters.csv"
COUNTERS_DIR = "/etc/gpufleet"
MONITORING_API = "monitoring.coreos.com/v1"
SCRAPE_CONFIG_API = "monitoring.coreos.com/v1alpha1"  # ScrapeConfig: v1alpha1 in prometheus-operator v0.76
OPS_SERVE_METRICS_PATH = "/metrics"  # gpufleet.ops.server: GET /metrics, whatever path the webhook posts to
WEBHOOK_FIELD = "gpufleet:ops.alertWebhookUrl"

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


@dataclass(frozen=True)
class ScrapeTarget:
    scheme: str  # the ScrapeConfig's enum: HTTP or HTTPS
    address: str  # host:port, as Prometheus's static_configs want it


def ops_serve_target(webhook_url: str) -> ScrapeTarget:
    """Where Prometheus scrapes `gpufleet ops serve`: the host, port and scheme Alertmanager posts to.

    Why derived and not a field of its own: one process serves both (POST / for Alertmanager,
    GET /metrics for Prometheus), so a second address could only disagree with the first. The
    URL's credentials (user:password@) are left out: a target's address becomes its `instance`
    label, and a secret never goes into a metric; the port is made explicit for the same reason
    (a stable `instance` whichever way the URL was written)."""
    parts = urlsplit(webhook_url)
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{webhook_url!r} has no valid port: {exc}", field=WEBHOOK_FIELD,
                          expected="http(s)://HOST[:PORT]/ with PORT in 1-65535") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{webhook_url!r} names no http(s) host", field=WEBHOOK_FIELD,
                          expected="http(s)://HOST[:PORT]/")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = port if port is not None else {"http": 80, "https": 443}[parts.scheme]
    return ScrapeTarget(parts.scheme.upper(), f"{host}:{port}")


def ops_serve_scrape_config(webhook_url: str, labels: Mapping[str, str], interval_s: int = 30) -> dict[str, Any]:
    """A prometheus-operator ScrapeConfig for `ops serve`'s pool metrics, with the `job` label the
    Slurm head node's scrape job gives them (`gpufleet`: `scrape.prometheus_config`). The metrics
    carry their own `node` label (the slot), which the rules join on; no relabelling needed."""
    target = ops_serve_target(webhook_url)
    return {"apiVersion": SCRAPE_CONFIG_API, "kind": "ScrapeConfig",
            "metadata": {"name": "gpufleet-ops-serve", "namespace": NAMESPACE, "labels": {**MANAGED_BY, **labels}},
            "spec": {"scheme": target.scheme, "metricsPath": OPS_SERVE_METRICS_PATH,
                     "scrapeInterval": f"{interval_s}s",
                     "staticConfigs": [{"targets": [target.address], "labels": {"job": mx.GPUFLEET_JOB}}]}}


def prometheus_stack_values(ops: OpsConfig) -> dict[str, Any]:
    """kube-prometheus-stack: select every ServiceMonitor, ScrapeConfig and rule, node_exporter on every node
    (gated ones too) scraped by gpufleet's ServiceMonitor only, Alertmanager to `ops serve`."""
    values: dict[str, Any] = {
        "prometheus": {"prometheusSpec": {"serviceMonitorSelectorNilUsesHelmValues": False,
                                          "ruleSelectorNilUsesHelmValues": False,
                                          "podMonitorSelectorNilUsesHelmValues": False,
                                          "scrapeConfigSelectorNilUsesHelmValues": False}},
        "prometheus-node-exporter": {"tolerations": gate_tolerations(), "prometheus": {"monitor": {"enabled": False}}},
        "grafana": {"enabled": False},  # gpufleet's reports are its own; a dashboard is the user's choice
    }
    if ops.alert_webhook_url is not None:  # the bearer token from the Secret gpufleet-webhook (key `token`)
        values["alertmanager"] = {"config": alertmanager_config(ops.alert_webhook_url, credentials_file=WEBHOOK_TOKEN),
                                  "alertmanagerSpec": {"secrets": [WEBHOOK_SECRET]}}
    return values


WEBHOOK_SECRET = "gpufleet-webhook"  # created by the operator in the monitoring namespace: key `token`
WEBHOOK_TOKEN = f"/etc/alertmanager/secrets/{WEBHOOK_SECRET}/token"  # where the operator mounts Secrets


def monitoring_objects(ops: OpsConfig, rules: dict[str, Any], stack: str, dcgm_version: str) -> list[dict[str, Any]]:
    """The custom and core objects (the chart, when `stack`, is the component's). Without
    `ops.alertWebhookUrl` nothing scrapes `ops serve` (`gpufleet.plan` warns: OPS_METRICS_NOT_SCRAPED)."""
    labels = dict(ops.prometheus_rule_labels)
    rule = prometheus_rule(rules, stack, NAMESPACE)
    rule["metadata"]["labels"] = {**rule["metadata"]["labels"], **labels}
    objects = [counters_configmap(dcgm_version), service_monitor(DCGM_SERVICE, labels),
               service_monitor(NODE_EXPORTER_SERVICE, labels), rule]
    if ops.alert_webhook_url is not None:
        objects.append(ops_serve_scrape_config(ops.alert_webhook_url, labels))
    return objects
