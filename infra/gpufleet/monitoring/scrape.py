"""What a Prometheus on a Slurm head node scrapes, and the PrometheusRule for a Kubernetes pool.

Why file service discovery: the targets file is regenerated from the plan (one entry per slot,
labelled `node=<slot>`, the label every rule groups by) without restarting Prometheus, and 1,250
nodes are one small JSON file per exporter. Pure: documents in, nothing written.
"""

from __future__ import annotations

from typing import Any, Sequence

from gpufleet.monitoring import metrics as m
from gpufleet.monitoring.rules import NODE_LABEL

RULE_FILE = "gpufleet-rules.yml"
TARGETS_DIR = "targets"


def targets(slots: Sequence[str], port: int) -> list[dict[str, Any]]:
    """file_sd entries: each slot's exporter by its host name (the slot: Slurm's NodeHostname)."""
    return [{"targets": [f"{slot}:{port}"], "labels": {NODE_LABEL: slot}} for slot in slots]


def prometheus_config(*, alertmanager: str, gpufleet: str, scrape_interval_s: int = 30) -> dict[str, Any]:
    """prometheus.yml for the head node: both exporters by file_sd, gpufleet's pool metrics, the rules."""
    def file_sd(job: str) -> dict[str, Any]:
        return {"job_name": job, "file_sd_configs": [{"files": [f"{TARGETS_DIR}/{job}.json"]}]}

    return {
        "global": {"scrape_interval": f"{scrape_interval_s}s", "evaluation_interval": f"{scrape_interval_s}s"},
        "rule_files": [RULE_FILE],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [file_sd(m.DCGM_JOB), file_sd(m.NODE_JOB),
                           {"job_name": m.GPUFLEET_JOB, "static_configs": [{"targets": [gpufleet]}]}],
    }


def alertmanager_config(webhook_url: str, *, group_wait_s: int = 10,
                        credentials_file: str | None = None, tls: dict[str, str] | None = None) -> dict[str, Any]:
    """Alertmanager routes every gpufleet alert to `gpufleet ops serve`, one notification per node,
    with the webhook's bearer token read from `credentials_file` (Alertmanager's own
    `http_config.authorization`; the token never sits in the configuration). None: no token
    (only for an `ops serve --no-auth` test bench). `tls`: Alertmanager's `http_config.tls_config`
    (`ca_file` for the server's CA; `cert_file`/`key_file` for `ops serve --client-ca`'s mutual TLS)."""
    hook: dict[str, Any] = {"url": webhook_url, "send_resolved": True}
    http: dict[str, Any] = {}
    if credentials_file is not None:
        http["authorization"] = {"type": "Bearer", "credentials_file": credentials_file}
    if tls:
        http["tls_config"] = dict(tls)
    if http:
        hook["http_config"] = http
    return {
        "route": {"receiver": "gpufleet", "group_by": ["alertname", NODE_LABEL], "group_wait": f"{group_wait_s}s",
                  "group_interval": "1m", "repeat_interval": "4h"},
        "receivers": [{"name": "gpufleet", "webhook_configs": [hook]}],
    }


def prometheus_rule(rules: dict[str, Any], stack: str, namespace: str = "gpu-monitoring") -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule (monitoring.coreos.com/v1)."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": f"gpufleet-{stack}", "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpufleet"}},
            "spec": rules}
