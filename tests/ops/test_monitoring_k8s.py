"""The Kubernetes pool's monitoring component under Pulumi's mocks: what it registers in each
`ops.prometheus` mode, in which order, and every custom object valid under the prometheus-operator
CRD schema (strictly: a field the schema does not declare fails, as the API server would prune it)."""

from __future__ import annotations

import asyncio
import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pulumi
import pytest
import yaml
from pulumi.runtime import settings

from gpufleet.program.capture import PROJECT, GpufleetMocks, Registration, RecordingMonitor
from gpufleet.errors import ConfigError
from gpufleet.findings import Level
from gpufleet.monitoring import metrics as mx
from gpufleet.monitoring import counters as monitoring_counters
from gpufleet.pool.kubernetes import monitoring_manifests as mm
from gpufleet.pool.kubernetes.monitoring import Monitoring, MonitoringConfig
from gpufleet.monitoring.rules import ADMITTED_BUSY, Thresholds, rules_document
from gpufleet.monitoring.scrape import prometheus_config
from gpufleet.plan import build_plan
from gpufleet.pool.kubernetes.chart_values import dcgm_exporter_values
from gpufleet.pool.protocol import GATE_TAINT, QUARANTINE_TAINT
from gpufleet.spec import OpsConfig, load_stack
from tests.pool.test_kubernetes_objects import strict, tolerates

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas" / "prometheus-operator"
SCHEMA_FILES = {"ServiceMonitor": "servicemonitors-v0.76.1.excerpt.openapi.yaml",
                "PrometheusRule": "prometheusrules-v0.77.1.openapi.yaml",
                "ScrapeConfig": "scrapeconfigs-v0.72.0.excerpt.openapi.yaml"}
API_VERSIONS = {"ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1",
                "ScrapeConfig": "monitoring.coreos.com/v1alpha1"}
WEBHOOK = "http://gpufleet-ops.example:9797/"
DCGM = "4.2.3"


@lru_cache(maxsize=None)
def schema(kind: str) -> dict[str, Any]:
    return strict(yaml.safe_load((SCHEMAS / SCHEMA_FILES[kind]).read_text()))


def validate(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == API_VERSIONS[obj["kind"]]
    jsonschema.Draft7Validator(schema(obj["kind"])).validate(obj)


def rules() -> dict[str, Any]:
    return rules_document(Thresholds(OpsConfig(), 512, DCGM, "/fsx"), "prod")


def register(ops: OpsConfig) -> list[Registration]:
    """The component alone, under the program's mocks (capture_program's recipe, without the program)."""
    mocks = GpufleetMocks(build_plan(load_stack("prod")), "prod", None)
    monitor = RecordingMonitor(mocks)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        settings.ROOT.set(None)
        pulumi.runtime.set_mocks(mocks, project=PROJECT, stack="prod", preview=False, monitor=monitor)
        settings.ROOT.set(None)
        loop.run_until_complete(pulumi.runtime.stack.run_in_stack(
            lambda: Monitoring("mon", MonitoringConfig(ops, rules(), "prod", DCGM))))
    finally:
        settings.SETTINGS.rpc_manager.clear()
        settings.SETTINGS.outputs.clear()
        loop.close()
        asyncio.set_event_loop(None)
    return monitor.registrations


def by_kind(regs: list[Registration], kind: str) -> list[Registration]:
    return [r for r in regs if r.inputs.get("kind") == kind]


@pytest.fixture(scope="module")
def installed() -> list[Registration]:
    return register(OpsConfig(alert_webhook_url=WEBHOOK))


@pytest.fixture(scope="module")
def existing() -> list[Registration]:
    return register(OpsConfig(prometheus="existing", prometheus_rule_labels={"release": "prom"}))


def test_the_component_parents_everything_and_orders_the_crs_after_the_chart(installed) -> None:
    (component,) = [r for r in installed if r.type == "gpufleet:ops:Monitoring"]
    children = [r for r in installed if r is not component]
    assert children and all(r.parent == component.urn for r in children)
    (release,) = [r for r in installed if r.type == "kubernetes:helm.sh/v3:Release"]
    assert (release.inputs["chart"], release.inputs["version"]) == ("kube-prometheus-stack", "62.5.0")
    assert release.inputs["repositoryOpts"]["repo"] == "https://prometheus-community.github.io/helm-charts"
    (ns,) = [r for r in installed if r.type == "kubernetes:core/v1:Namespace"]
    (counters,) = [r for r in installed if r.type == "kubernetes:core/v1:ConfigMap"]
    assert ns.urn in counters.options["dependsOn"] and ns.urn in release.options["dependsOn"]
    custom = [r for r in installed if r.type.startswith("kubernetes:monitoring.coreos.com/")]
    assert sorted(r.inputs["kind"] for r in custom) == ["PrometheusRule", "ScrapeConfig", "ServiceMonitor",
                                                        "ServiceMonitor"]
    (scrape,) = [r for r in custom if r.type == "kubernetes:monitoring.coreos.com/v1alpha1:ScrapeConfig"]
    assert scrape.inputs["kind"] == "ScrapeConfig"
    for r in custom:  # the chart installs their CRDs
        assert release.urn in r.options["dependsOn"]


def test_the_stacks_prometheus_selects_gpufleets_objects_and_its_alertmanager_calls_ops_serve(installed) -> None:
    (release,) = [r for r in installed if r.type == "kubernetes:helm.sh/v3:Release"]
    values = release.inputs["values"]
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False and spec["ruleSelectorNilUsesHelmValues"] is False
    assert spec["scrapeConfigSelectorNilUsesHelmValues"] is False  # else only `release: <chart release>` is scraped
    node_exporter = values["prometheus-node-exporter"]
    assert tolerates(node_exporter["tolerations"], GATE_TAINT, "pending", "NoSchedule")
    assert tolerates(node_exporter["tolerations"], QUARANTINE_TAINT, "xid-79", "NoExecute")
    assert node_exporter["prometheus"]["monitor"]["enabled"] is False  # scraped once, by gpufleet's ServiceMonitor
    config = values["alertmanager"]["config"]
    (receiver,) = config["receivers"]
    assert config["route"]["receiver"] == receiver["name"]
    assert receiver["webhook_configs"] == [{"url": WEBHOOK, "send_resolved": True, "http_config": {
        "authorization": {"type": "Bearer", "credentials_file": "/etc/alertmanager/secrets/gpufleet-webhook/token"}}}]
    # the chart mounts the operator's Secret gpufleet-webhook there (alertmanagerSpec.secrets)
    assert values["alertmanager"]["alertmanagerSpec"]["secrets"] == ["gpufleet-webhook"]
    assert "node" in config["route"]["group_by"]


def test_with_an_existing_prometheus_only_labelled_objects_are_created(existing) -> None:
    assert not [r for r in existing if r.type == "kubernetes:helm.sh/v3:Release"]
    custom = [r for r in existing if r.type.startswith("kubernetes:monitoring.coreos.com/")]
    assert len(custom) == 3  # no ScrapeConfig: without ops.alertWebhookUrl there is no address to scrape
    for r in custom:
        assert r.inputs["metadata"]["labels"]["release"] == "prom"  # the user's selectors
        validate(r.inputs)


def test_every_custom_object_is_valid_under_the_prometheus_operator_crds(installed) -> None:
    custom = [r.inputs for r in installed if r.type.startswith("kubernetes:monitoring.coreos.com/")]
    assert len(custom) == 4
    for obj in custom:
        validate(obj)
    (rule,) = [o for o in custom if o["kind"] == "PrometheusRule"]
    assert rule["spec"] == rules()


def test_the_validator_refuses_what_the_api_server_would_prune_or_reject(installed) -> None:
    monitor = copy.deepcopy(next(r.inputs for r in installed if r.inputs.get("kind") == "ServiceMonitor"))
    monitor["spec"]["attachMetaData"] = monitor["spec"].pop("attachMetadata")  # pruned: no node labels, no `node`
    with pytest.raises(jsonschema.ValidationError, match="attachMetaData"):
        validate(monitor)
    monitor = copy.deepcopy(next(r.inputs for r in installed if r.inputs.get("kind") == "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"
    with pytest.raises(jsonschema.ValidationError, match="rename"):
        validate(monitor)
    rule = copy.deepcopy(next(r.inputs for r in installed if r.inputs.get("kind") == "PrometheusRule"))
    rule["spec"]["groups"][1]["rules"][0]["for"] = "ten minutes"
    with pytest.raises(jsonschema.ValidationError, match="ten minutes"):
        validate(rule)


def test_the_service_monitors_label_each_target_with_its_slot_and_the_rules_job(installed) -> None:
    monitors = {r.inputs["metadata"]["name"]: r.inputs for r in by_kind(installed, "ServiceMonitor")}
    assert set(monitors) == {"gpufleet-dcgm-exporter", "gpufleet-node-exporter"}
    for name, job in (("gpufleet-dcgm-exporter", "dcgm-exporter"), ("gpufleet-node-exporter", "node-exporter")):
        spec = monitors[name]["spec"]
        assert spec["attachMetadata"] == {"node": True}
        relabel = spec["endpoints"][0]["relabelings"]
        # Prometheus exposes the Node label gpufleet.io/slot under this name
        assert {"action": "replace", "sourceLabels": ["__meta_kubernetes_node_label_gpufleet_io_slot"],
                "targetLabel": "node"} in relabel
        assert {"action": "replace", "replacement": job, "targetLabel": "job"} in relabel
    dcgm = monitors["gpufleet-dcgm-exporter"]["spec"]
    assert dcgm["selector"]["matchLabels"]["app.kubernetes.io/name"] == "dcgm-exporter"
    assert dcgm["namespaceSelector"] == {"matchNames": [mm.NAMESPACE]}


def test_the_counters_configmap_is_the_deployed_file_and_the_exporter_reads_it(installed) -> None:
    (counters,) = [r for r in installed if r.type == "kubernetes:core/v1:ConfigMap"]
    assert counters.inputs["data"] == {mm.COUNTERS_FILE: monitoring_counters.deployed_csv(DCGM)}
    obj = {"apiVersion": "v1", "kind": "ConfigMap", **{k: counters.inputs[k] for k in ("metadata", "data")}}
    kubernetes_validate.validate(obj, "1.33", strict=True)
    assert counters.inputs["metadata"]["namespace"] == mm.NAMESPACE
    values = dcgm_exporter_values("p5.48xlarge")  # the pool's dcgm-exporter chart values
    assert values["arguments"] == ["-f", f"{mm.COUNTERS_DIR}/{mm.COUNTERS_FILE}"]
    (volume,) = values["extraConfigMapVolumes"]
    (mount,) = values["extraVolumeMounts"]
    assert volume["configMap"]["name"] == counters.inputs["metadata"]["name"] and mount["name"] == volume["name"]
    assert mount["mountPath"] == mm.COUNTERS_DIR


def test_the_program_wires_monitoring_into_the_pool_and_the_exporter_waits_for_its_counters(full_capture) -> None:
    prod = full_capture("prod")
    (component,) = prod.of_type("gpufleet:ops:Monitoring")
    (pool,) = prod.of_type("gpufleet:pool:KubernetesPool")
    assert component.parent == pool.urn
    (counters,) = [r for r in prod.registrations if r.parent == component.urn and r.type == "kubernetes:core/v1:ConfigMap"]
    (dcgm,) = [r for r in prod.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "dcgm-exporter"]
    assert counters.urn in dcgm.options["dependsOn"]
    assert dcgm.inputs["values"]["extraConfigMapVolumes"][0]["configMap"]["name"] == counters.inputs["metadata"]["name"]
    (rule,) = [r for r in prod.registrations if r.inputs.get("kind") == "PrometheusRule"]
    validate(rule.inputs)
    assert rule.inputs["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpufleet"


def test_without_a_webhook_the_stacks_alertmanager_keeps_the_charts_route() -> None:
    """No `ops.alertWebhookUrl`: gpufleet does not invent an address for `ops serve`."""
    values = mm.prometheus_stack_values(OpsConfig())
    assert "alertmanager" not in values
    assert values["prometheus"]["prometheusSpec"]["ruleSelectorNilUsesHelmValues"] is False


def test_the_stacks_prometheus_scrapes_ops_serve_where_alertmanager_posts_with_the_slurm_job(installed) -> None:
    (scrape,) = by_kind(installed, "ScrapeConfig")
    (release,) = [r for r in installed if r.type == "kubernetes:helm.sh/v3:Release"]
    (component,) = [r for r in installed if r.type == "gpufleet:ops:Monitoring"]
    assert scrape.parent == component.urn and release.urn in scrape.options["dependsOn"]
    spec = scrape.inputs["spec"]
    assert (spec["scheme"], spec["metricsPath"]) == ("HTTP", "/metrics")  # WEBHOOK is http://gpufleet-ops.example:9797/
    (static,) = spec["staticConfigs"]
    assert static["targets"] == ["gpufleet-ops.example:9797"]
    # the Slurm head node's job for the same process: the series carry the same job on both schedulers
    slurm_jobs = {c["job_name"]: c for c in prometheus_config(alertmanager="a:9093", gpufleet="b:9797")["scrape_configs"]}
    assert static["labels"] == {"job": mx.GPUFLEET_JOB} and mx.GPUFLEET_JOB in slurm_jobs
    # and the metrics it scrapes are the ones the utilisation rules' recording rule joins
    (record,) = [r for g in rules()["groups"] for r in g["rules"] if r.get("record") == ADMITTED_BUSY]
    assert mx.NODE_ADMITTED in record["expr"] and mx.NODE_BUSY in record["expr"]
    assert scrape.inputs["metadata"]["namespace"] == mm.NAMESPACE


def test_an_existing_prometheus_gets_the_scrape_config_with_the_service_monitors_labels() -> None:
    regs = register(OpsConfig(prometheus="existing", prometheus_rule_labels={"release": "prom"},
                              alert_webhook_url="https://ops.internal/alerts"))
    (scrape,) = by_kind(regs, "ScrapeConfig")
    monitors = by_kind(regs, "ServiceMonitor")
    assert monitors and all(m.inputs["metadata"]["labels"] == scrape.inputs["metadata"]["labels"] for m in monitors)
    assert scrape.inputs["metadata"]["labels"]["release"] == "prom"
    assert scrape.inputs["spec"]["scheme"] == "HTTPS"
    assert scrape.inputs["spec"]["staticConfigs"][0]["targets"] == ["ops.internal:443"]
    validate(scrape.inputs)


@pytest.mark.parametrize(("url", "scheme", "address"), [
    ("http://10.0.0.5:9797/", "HTTP", "10.0.0.5:9797"),
    ("http://ops.example/alerts", "HTTP", "ops.example:80"),
    ("https://user:s3cret@ops.example:8443/hook", "HTTPS", "ops.example:8443"),  # no credentials in `instance`
    ("http://[fd00::5]:9797/", "HTTP", "[fd00::5]:9797"),
])
def test_the_target_is_the_webhooks_host_port_and_scheme(url, scheme, address) -> None:
    assert mm.ops_serve_target(url) == mm.ScrapeTarget(scheme, address)
    scrape = mm.ops_serve_scrape_config(url, {})
    assert "s3cret" not in str(scrape)
    validate(scrape)


def test_a_webhook_url_with_an_invalid_port_is_a_config_error_naming_the_field() -> None:
    ops = OpsConfig(alert_webhook_url="http://ops.example:99999/")  # the field's pattern lets it through
    with pytest.raises(ConfigError, match="alertWebhookUrl") as caught:
        mm.monitoring_objects(ops, rules(), "prod", DCGM)
    assert caught.value.field == mm.WEBHOOK_FIELD


def test_the_validator_refuses_a_scrape_config_the_api_server_would_reject(installed) -> None:
    scrape = copy.deepcopy(by_kind(installed, "ScrapeConfig")[0].inputs)
    scrape["spec"]["scheme"] = "http"  # the CRD's enum is upper case
    with pytest.raises(jsonschema.ValidationError, match="'http'"):
        validate(scrape)
    scrape = copy.deepcopy(by_kind(installed, "ScrapeConfig")[0].inputs)
    scrape["spec"]["staticConfigs"][0]["labels"]["job"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate(scrape)
    scrape = copy.deepcopy(by_kind(installed, "ScrapeConfig")[0].inputs)
    scrape["spec"]["path"] = scrape["spec"].pop("metricsPath")  # pruned: Prometheus would scrape its default
    with pytest.raises(jsonschema.ValidationError, match="path"):
        validate(scrape)


def warnings_of(spec) -> set[str]:
    return {f.code for f in build_plan(spec).findings if f.level is Level.WARNING}


def test_validate_warns_that_utilisation_alerts_cannot_fire_on_kubernetes_without_the_webhook() -> None:
    prod = load_stack("prod")
    assert prod.pool.type == "kubernetes" and prod.ops.alert_webhook_url is None
    (finding,) = [f for f in build_plan(prod).findings if f.code == "OPS_METRICS_NOT_SCRAPED"]
    assert finding.level is Level.WARNING and finding.field == mm.WEBHOOK_FIELD
    assert "GpuUtilisationLow" in finding.message and "GpuMemoryHigh" in finding.message
    with_webhook = prod.model_copy(update={"ops": OpsConfig(alert_webhook_url=WEBHOOK)})
    assert "OPS_METRICS_NOT_SCRAPED" not in warnings_of(with_webhook)
    dev = load_stack("dev")  # Slurm: the head node's Prometheus scrapes ops serve on 127.0.0.1
    assert dev.pool.type == "slurm" and "OPS_METRICS_NOT_SCRAPED" not in warnings_of(dev)
