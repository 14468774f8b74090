"""The files a Slurm stack's monitoring roles install, written under the stack's state dir, and the
role-prefixed extravars that name them (the way `gpufleet.pool.slurm.files` hands over slurm.conf).

Why written by gpufleet, not templated in the roles: the counters file, the rules and the
Alertmanager route are generated from the BOM, the gates and the stack (`monitoring_counters`,
`rules`, `scrape`), and `gpufleet ops rules` writes the very same documents for review. The one
thing the head node's role builds itself is the scrape targets, from the inventory it runs
against (every GPU node by slot), so a replaced node's address is never stale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpufleet.bom import Bom, load_bom, resolve_bom_path
from gpufleet.durable import write_atomic
from gpufleet.errors import ConfigError
from gpufleet.gates.settings import GateSettings
from gpufleet.monitoring import counters as monitoring_counters, scrape
from gpufleet.monitoring.rules import Thresholds, rules_document
from gpufleet.project import Project
from gpufleet.spec import ClusterSpec

ALERTMANAGER_PORT = 9093
PROMETHEUS_PORT = 9090
OPS_SERVE = "127.0.0.1:9797"  # `gpufleet ops serve` beside Prometheus on the head node
ALERTMANAGER_TOKEN = "/etc/alertmanager/gpufleet-webhook.token"  # the role installs the stack's token here
TOKEN_FILE = "webhook.token"  # the webhook's bearer token, under the stack's state dir (0600)
FILES = {"counters": "dcgm-counters.csv", "prometheus": "prometheus.yml", "rules": scrape.RULE_FILE,
         "alertmanager": "alertmanager.yml"}


def _dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=120)


def documents(spec: ClusterSpec, t: Thresholds, stack: str) -> dict[str, str]:
    """File name -> content, pure."""
    webhook = spec.ops.alert_webhook_url or f"http://{OPS_SERVE}/"
    return {
        FILES["counters"]: monitoring_counters.deployed_csv(t.dcgm_version),
        FILES["prometheus"]: _dump(scrape.prometheus_config(alertmanager=f"127.0.0.1:{ALERTMANAGER_PORT}",
                                                           gpufleet=OPS_SERVE)),
        FILES["rules"]: _dump(rules_document(t, stack)),
        FILES["alertmanager"]: _dump(scrape.alertmanager_config(webhook, credentials_file=ALERTMANAGER_TOKEN)),
    }


def ensure_token(path: Path) -> Path:
    """The webhook's bearer token file, created (0600, 32 random bytes) when missing; never rotated here."""
    import secrets

    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, secrets.token_urlsafe(32) + "\n")  # mkstemp: 0600
    return path


def monitoring_extravars(spec: ClusterSpec, bom: Bom, t: Thresholds, stack: str, out_dir: Path) -> dict[str, Any]:
    """Write the files under `out_dir` (atomically) and return the monitoring roles' extravars, with
    the webhook token (beside `out_dir`) both Alertmanager and `ops serve` are given."""
    if bom.monitoring is None:
        raise ConfigError("the BOM pins no monitoring agents", field="monitoring",
                          expected="monitoring: {dcgm_exporter, node_exporter, prometheus, alertmanager}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in documents(spec, t, stack).items():
        write_atomic(out_dir / name, text)
    pins = bom.monitoring
    token = ensure_token(out_dir.parent / TOKEN_FILE)
    ops_serve = {"ops_webhook_token_file": str(token)} if spec.ops.alert_webhook_url is None else {}  # on the head
    return ops_serve | {
        "monitoring_server_webhook_token_file": str(token),
        "monitoring_exporters_dcgm_exporter_version": pins.dcgm_exporter,
        "monitoring_exporters_node_exporter_version": pins.node_exporter,
        "monitoring_exporters_counters_file": str(out_dir / FILES["counters"]),
        "monitoring_exporters_dcgm_port": spec.ops.dcgm_exporter_port,
        "monitoring_exporters_node_port": spec.ops.node_exporter_port,
        "monitoring_server_prometheus_version": pins.prometheus,
        "monitoring_server_alertmanager_version": pins.alertmanager,
        "monitoring_server_config_dir": str(out_dir),
        "monitoring_server_dcgm_port": spec.ops.dcgm_exporter_port,
        "monitoring_server_node_port": spec.ops.node_exporter_port,
    }


def stack_monitoring_extravars(spec: ClusterSpec, project: Project, stack: str) -> dict[str, Any]:
    """For a Slurm stack's configure runs: the files under `.gpufleet/<stack>/monitoring/`, thresholds
    from the gates' settings and the project's BOM (as `gpufleet ops rules` takes them)."""
    bom = load_bom(resolve_bom_path(spec, project))
    limit = GateSettings.from_config(spec.gates, spec.cluster.instance_type).remap_uncorrectable_limit
    t = Thresholds(spec.ops, limit, bom.components.dcgm.version, spec.storage.mount_path)
    return monitoring_extravars(spec, bom, t, stack, project.state_dir(stack) / "monitoring")
