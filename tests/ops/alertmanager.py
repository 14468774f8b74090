"""Alertmanager webhook notifications as Alertmanager sends them: version 4 of the webhook payload
(prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

from __future__ import annotations

from typing import Any


def alert(node: str | None, name: str = "GpuXidFatal", action: str = "quarantine", status: str = "firing",
          **labels: str) -> dict[str, Any]:
    all_labels = {"alertname": name, "severity": "critical", "gpufleet_action": action, "stack": "crash40"} | labels
    if node is not None:
        all_labels["node"] = node
    return {"status": status, "labels": all_labels,
            "annotations": {"summary": "a GPU reported an Xid the gates quarantine on", "source": "infra/gpufleet/gates/xid.py"},
            "startsAt": "2026-12-01T00:10:00.000Z",
            "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-12-01T00:20:00.000Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
            "fingerprint": f"{abs(hash((node, name))):016x}"}


def notification(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{alertname="GpuXidFatal"}', "truncatedAlerts": 0, "status": status,
            "receiver": "gpufleet", "groupLabels": {"alertname": "GpuXidFatal"},
            "commonLabels": {"alertname": "GpuXidFatal"}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts)}
