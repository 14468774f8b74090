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

from infra.cloud.capture import PROJECT, GpufleetMocks, Registration, RecordingMonitor
from infra.ops import monitoring_counters
from infra.ops import monitoring_manifests as mm
from infra.ops.monitoring_k8s import Monitoring, MonitoringConfig
from infra.ops.rules import Thresholds, rules_document
from infra.plan import build_plan
from infra.pool.kubernetes.chart_values import dcgm_exporter_values
from infra.pool.protocol import GATE_TAINT, QUARANTINE_TAINT
from infra.spec import OpsConfig, load_stack
from tests.pool.test_kubernetes_objects import strict, tolerates

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas" / "prometheus-operator"
SCHEMA_FILES = {"ServiceMonitor": "servicemonitors-v0.76.1.excerpt.openapi.yaml",
                "PrometheusRule": "prometheusrules-v0.77.1.openapi.yaml"}
WEBHOOK = "http://gpufleet-ops.example:9797/"
DCGM = "4.2.3"


@lru_cache(maxsize=None)
def schema(kind: str) -> dict[str, Any]:
    return strict(yaml.safe_load((SCHEMAS / SCHEMA_FILES[kind]).read_text()))


def validate(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
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
    custom = [r for r in installed if r.type.startswith("kubernetes:monitoring.coreos.com/v1:")]
    assert sorted(r.inputs["kind"] for r in custom) == ["PrometheusRule", "ServiceMonitor", "ServiceMonitor"]
    for r in custom:  # the chart installs their CRDs
        assert release.urn in r.options["dependsOn"]


def test_the_stacks_prometheus_selects_gpufleets_objects_and_its_alertmanager_calls_ops_serve(installed) -> None:
    (release,) = [r for r in installed if r.type == "kubernetes:helm.sh/v3:Release"]
    values = release.inputs["values"]
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False and spec["ruleSelectorNilUsesHelmValues"] is False
    node_exporter = values["prometheus-node-exporter"]
    assert tolerates(node_exporter["tolerations"], GATE_TAINT, "pending", "NoSchedule")
    assert tolerates(node_exporter["tolerations"], QUARANTINE_TAINT, "xid-79", "NoExecute")
    assert node_exporter["prometheus"]["monitor"]["enabled"] is False  # scraped once, by gpufleet's ServiceMonitor
    config = values["alertmanager"]["config"]
    (receiver,) = config["receivers"]
    assert config["route"]["receiver"] == receiver["name"]
    assert receiver["webhook_configs"] == [{"url": WEBHOOK, "send_resolved": True}]
    assert "node" in config["route"]["group_by"]


def test_with_an_existing_prometheus_only_labelled_objects_are_created(existing) -> None:
    assert not [r for r in existing if r.type == "kubernetes:helm.sh/v3:Release"]
    custom = [r for r in existing if r.type.startswith("kubernetes:monitoring.coreos.com/v1:")]
    assert len(custom) == 3
    for r in custom:
        assert r.inputs["metadata"]["labels"]["release"] == "prom"  # the user's selectors
        validate(r.inputs)


def test_every_custom_object_is_valid_under_the_prometheus_operator_crds(installed) -> None:
    custom = [r.inputs for r in installed if r.type.startswith("kubernetes:monitoring.coreos.com/v1:")]
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
