"""Prometheus recording and alerting rules, generated from the BOM, the gates and the stack's ops keys.

Why generated: a fatal Xid, a row-remap limit or the operating range must mean the same thing in
production as at admission. The Xid buckets come from `gpufleet.gates.xid`, the row-remap limit from
`GateSettings`, the clock-event field from the BOM's DCGM version, the Lustre mount from the
stack's storage, the operating range and the alert budget from `OpsConfig`. Nothing here does I/O.

Every alert is per node (`max by (node)`): the scrape config puts a `node` label (the pool slot) on
each target. Its `gpufleet_action` label tells `gpufleet ops serve` what to do: `quarantine` (the
node is faulty: the same quarantine the gates use) or `page` (a person decides: a low-utilisation
job is not a hardware fault, a missing scrape may be Prometheus's own).

The DCGM metric names are the exporter's counters file's (`monitoring_counters.deployed`): a rule
document that reads a field that file does not export is refused, since the alert could never fire.

Each rule carries a series that fires and one that does not; `unit_tests()` turns them into
`promtool test rules` files, so the generated rules are tested with the thresholds they were
generated with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.gates.verdict import Verdict
from gpufleet.gates.xid import XID_RULES
from gpufleet.monitoring import metrics as m
from gpufleet.monitoring import counters as monitoring_counters
from gpufleet.spec import OpsConfig

QUARANTINE, PAGE = "quarantine", "page"
ACTION_LABEL = "gpufleet_action"
NODE_LABEL = "node"
TEST_NODE = "node-under-test"

UTIL_BY_NODE = "gpufleet:gpu_util:avg_by_node"
FB_RATIO_BY_NODE = "gpufleet:fb_used_ratio:max_by_node"
ADMITTED_BUSY = "gpufleet:node_admitted_busy"
DCGM_METRIC = re.compile(r"\bDCGM_(?:FI|EXP)_[A-Z0-9_]+")


@dataclass(frozen=True)
class Series:
    """One promtool input series: a selector with labels and its values in expanding notation."""

    selector: str
    values: str


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    for_minutes: int
    severity: str  # critical | warning | info
    action: str  # QUARANTINE | PAGE
    summary: str
    source: str  # where the threshold comes from
    fires: tuple[Series, ...]
    quiet: tuple[Series, ...]

    def labels(self) -> dict[str, str]:
        return {"severity": self.severity, ACTION_LABEL: self.action}

    def annotations(self) -> dict[str, str]:
        return {"summary": self.summary, "source": self.source}


@dataclass(frozen=True)
class Thresholds:
    """What the rules are generated from (one object, so a test can state it)."""

    ops: OpsConfig
    remap_uncorrectable_limit: int
    dcgm_version: str
    lustre_mount: str | None  # None: the stack has no Lustre


def _dcgm(metric: str, value: str, **labels: str) -> Series:
    all_labels = {"job": m.DCGM_JOB, NODE_LABEL: TEST_NODE, "gpu": "0"} | labels
    return Series(metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(all_labels.items())) + "}", value)


def _node(metric: str, value: str, **labels: str) -> Series:
    all_labels = {NODE_LABEL: TEST_NODE} | labels
    return Series(metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(all_labels.items())) + "}", value)


def _any_of(metric: str, codes: list[int]) -> str:
    return " or ".join(f"{metric} == {c}" for c in codes)


def _bit(metric: str, bit: int) -> str:
    return f"floor({metric} / {bit}) % 2 == 1"


def _busy(admitted: str = "1", busy: str = "1") -> tuple[Series, ...]:
    return (_node(m.NODE_ADMITTED, f"{admitted}x60", job=m.GPUFLEET_JOB),
            _node(m.NODE_BUSY, f"{busy}x60", job=m.GPUFLEET_JOB))


def recording_rules() -> list[dict[str, str]]:
    fb = f"{m.FB_USED} / ({m.FB_USED} + {m.FB_FREE})"
    return [
        {"record": UTIL_BY_NODE, "expr": f"avg by ({NODE_LABEL}) ({m.GPU_UTIL})"},
        {"record": FB_RATIO_BY_NODE, "expr": f"max by ({NODE_LABEL}) ({fb})"},
        {"record": ADMITTED_BUSY, "expr": f"max by ({NODE_LABEL}) ({m.NODE_ADMITTED} == 1) and on ({NODE_LABEL}) "
                                          f"max by ({NODE_LABEL}) ({m.NODE_BUSY} == 1)"},
    ]


def alert_rules(t: Thresholds) -> list[AlertRule]:
    """The alerts for one stack, in a stable order."""
    ops, w = t.ops, t.ops.error_window_minutes
    by_node = f"max by ({NODE_LABEL})"
    fatal = sorted(x for x, r in XID_RULES.items() if r.verdict is Verdict.QUARANTINE)
    benign = sorted(x for x, r in XID_RULES.items() if r.verdict is Verdict.WARN)
    reset = next(x for x, r in sorted(XID_RULES.items()) if r.verdict is Verdict.REMEDIATE)
    clock = m.clock_events_field(t.dcgm_version)
    hw_bits = (m.HW_SLOWDOWN, m.HW_THERMAL, m.HW_POWER_BRAKE)
    rules = [
        AlertRule("GpuXidFatal", f"{by_node} ({_any_of(m.XID, fatal)})", 0, "critical", QUARANTINE,
                  f"a GPU reported an Xid the gates quarantine on ({', '.join(map(str, fatal))})",
                  "infra/gpufleet/gates/xid.py: the QUARANTINE bucket",
                  (_dcgm(m.XID, "0 0 79x20"),), (_dcgm(m.XID, f"0 0 {benign[0]}x20"),)),
        AlertRule("GpuXidNeedsReset", f"{by_node} ({m.XID} > 0 unless ({_any_of(m.XID, fatal + benign)}))", 0,
                  "critical", QUARANTINE,
                  "a GPU reported an Xid that needs a reset and a retest (the REMEDIATE bucket or an unlisted one)",
                  "infra/gpufleet/gates/xid.py: REMEDIATE bucket and unlisted codes",
                  (_dcgm(m.XID, f"0 0 {reset}x20"),), (_dcgm(m.XID, f"0 0 {benign[-1]}x20"),)),
        AlertRule("GpuEccUncorrectable", f"{by_node} ({m.ECC_DBE_VOLATILE}) > 0", 0, "critical", QUARANTINE,
                  "volatile uncorrectable (double-bit) ECC errors",
                  "infra/gpufleet/gates/checks/gpu.py check_ecc_uncorrectable: any volatile uncorrectable error",
                  (_dcgm(m.ECC_DBE_VOLATILE, "0 0 2x20"),), (_dcgm(m.ECC_DBE_VOLATILE, "0x20"),)),
        AlertRule("GpuRowRemapFailure", f"{by_node} ({m.ROW_REMAP_FAILURE}) > 0", 0, "critical", QUARANTINE,
                  "row remapping failed (sticky; RMA path)", "infra/gpufleet/gates/checks/gpu.py check_row_remap: failure",
                  (_dcgm(m.ROW_REMAP_FAILURE, "0 1x20"),), (_dcgm(m.ROW_REMAP_FAILURE, "0x20"),)),
        AlertRule("GpuRowRemapExhausted", f"{by_node} ({m.REMAPPED_UNCORRECTABLE}) > {t.remap_uncorrectable_limit}",
                  0, "critical", QUARANTINE,
                  f"more than {t.remap_uncorrectable_limit} uncorrectable row remaps on a GPU",
                  "GateSettings.remap_uncorrectable_limit",
                  (_dcgm(m.REMAPPED_UNCORRECTABLE, f"{t.remap_uncorrectable_limit + 1}x20"),),
                  (_dcgm(m.REMAPPED_UNCORRECTABLE, f"{t.remap_uncorrectable_limit}x20"),)),
        AlertRule("GpuNvlinkErrors", f"{by_node} (increase({m.NVLINK_CRC_FLIT}[{w}m])) > {ops.nvlink_crc_errors_max}",
                  0, "critical", QUARANTINE,
                  f"more than {ops.nvlink_crc_errors_max} NVLink CRC flit errors on a GPU in {w} minutes",
                  "gpufleet:ops.nvlinkCrcErrorsMax, errorWindowMinutes",
                  (_dcgm(m.NVLINK_CRC_FLIT, f"0+{ops.nvlink_crc_errors_max // max(w // 2, 1) + 10}x{w * 3}"),),
                  (_dcgm(m.NVLINK_CRC_FLIT, f"5x{w * 3}"),)),
        AlertRule("GpuHardwareSlowdown", f"{by_node} ({' or '.join(_bit(clock, b.bit) for b in hw_bits)})",
                  ops.slowdown_minutes, "critical", QUARANTINE,
                  "a GPU held a hardware slowdown (" + ", ".join(b.name for b in hw_bits) + ")",
                  f"{clock} bits; gpufleet:ops.slowdownMinutes",
                  (_dcgm(clock, f"{m.HW_THERMAL.bit}x{ops.slowdown_minutes * 3}"),),
                  (_dcgm(clock, f"{0x4 | 0x1}x{ops.slowdown_minutes * 3}"),)),
        AlertRule("GpuThermalThrottle", f"{by_node} ({_bit(clock, m.SW_THERMAL.bit)})", ops.slowdown_minutes,
                  "warning", PAGE, "a GPU held a software thermal slowdown (cooling, airflow)",
                  f"{clock} bit {m.SW_THERMAL.name}; gpufleet:ops.slowdownMinutes",
                  (_dcgm(clock, f"{m.SW_THERMAL.bit}x{ops.slowdown_minutes * 3}"),),
                  (_dcgm(clock, f"{0x4}x{ops.slowdown_minutes * 3}"),)),
        AlertRule("EfaErrors", f'{by_node} (increase({m.EFA_RX_ERRORS}{{device=~"{m.EFA_DEVICE_RE}"}}[{w}m])) '
                               f"> {ops.efa_errors_max}", 0, "critical", QUARANTINE,
                  f"more than {ops.efa_errors_max} receive errors on an EFA device in {w} minutes",
                  "gpufleet:ops.efaErrorsMax, errorWindowMinutes",
                  (_node(m.EFA_RX_ERRORS, f"0+{ops.efa_errors_max // max(w // 2, 1) + 10}x{w * 3}",
                         device="rdmap16s27", port="1", job=m.NODE_JOB),),
                  (_node(m.EFA_RX_ERRORS, f"0+{ops.efa_errors_max // max(w // 2, 1) + 10}x{w * 3}",
                         device="mlx5_0", port="1", job=m.NODE_JOB),)),
        AlertRule("EfaPortDown", f'{by_node} ({m.EFA_PORT_STATE}{{device=~"{m.EFA_DEVICE_RE}"}} != {m.PORT_ACTIVE})',
                  ops.scrape_missing_minutes, "critical", QUARANTINE, "an EFA port is not ACTIVE",
                  "node_exporter infiniband state_id; gpufleet:ops.scrapeMissingMinutes",
                  (_node(m.EFA_PORT_STATE, f"1x{ops.scrape_missing_minutes * 3}", device="rdmap16s27", port="1",
                         job=m.NODE_JOB),),
                  (_node(m.EFA_PORT_STATE, f"{m.PORT_ACTIVE}x{ops.scrape_missing_minutes * 3}", device="rdmap16s27",
                         port="1", job=m.NODE_JOB),)),
        AlertRule("NodeScrapeMissing", f'{by_node} (up{{job=~"{m.DCGM_JOB}|{m.NODE_JOB}"}} == 0)',
                  ops.scrape_missing_minutes, "warning", PAGE,
                  "a node's exporter is not answering Prometheus (the node, the exporter or the network)",
                  "gpufleet:ops.scrapeMissingMinutes",
                  (_node("up", f"1 0x{ops.scrape_missing_minutes * 3}", job=m.DCGM_JOB),),
                  (_node("up", f"1x{ops.scrape_missing_minutes * 3}", job=m.DCGM_JOB),)),
    ]
    if t.lustre_mount is not None:
        fs = f'{m.NODE_FS_SIZE}{{fstype="lustre",mountpoint="{t.lustre_mount}"}}'
        length = ops.scrape_missing_minutes * 3
        rules.append(AlertRule(
            "LustreMountMissing", f'{by_node} (up{{job="{m.NODE_JOB}"}} == 1) unless {by_node} ({fs})',
            ops.scrape_missing_minutes, "critical", QUARANTINE, f"the Lustre file system is not mounted at {t.lustre_mount}",
            "gpufleet:storage.mountPath",
            (_node("up", f"1x{length}", job=m.NODE_JOB),
             _node(m.NODE_FS_SIZE, f"1e12x{length}", fstype="ext4", mountpoint="/", job=m.NODE_JOB)),
            (_node("up", f"1x{length}", job=m.NODE_JOB),
             _node(m.NODE_FS_SIZE, f"1e12x{length}", fstype="lustre", mountpoint=t.lustre_mount, job=m.NODE_JOB))))
    lo, hi, mins = ops.util_min_percent, ops.util_max_percent, ops.utilisation_minutes
    busy_only = f" and on ({NODE_LABEL}) {ADMITTED_BUSY}"
    rules += [
        AlertRule("GpuUtilisationLow", f"{UTIL_BY_NODE} < {lo:g}{busy_only}", mins, "warning", PAGE,
                  f"an admitted node running work averages under {lo:g}% GPU utilisation",
                  "gpufleet:ops.utilMinPercent (the seed's operating range)",
                  (_dcgm(m.GPU_UTIL, "40x60"),) + _busy(), (_dcgm(m.GPU_UTIL, "40x60"),) + _busy(busy="0")),
        AlertRule("GpuUtilisationHigh", f"{UTIL_BY_NODE} > {hi:g}{busy_only}", mins, "info", PAGE,
                  f"an admitted node running work averages over {hi:g}% GPU utilisation (no headroom)",
                  "gpufleet:ops.utilMaxPercent (the seed's operating range)",
                  (_dcgm(m.GPU_UTIL, "99x60"),) + _busy(), (_dcgm(m.GPU_UTIL, f"{(lo + hi) / 2:g}x60"),) + _busy()),
        AlertRule("GpuMemoryHigh", f"{FB_RATIO_BY_NODE} > {ops.memory_max_fraction:g}{busy_only}", mins, "warning",
                  PAGE, f"a GPU of an admitted node running work uses over {ops.memory_max_fraction:.0%} of its memory",
                  "gpufleet:ops.memoryMaxFraction (the seed's operating range)",
                  (_dcgm(m.FB_USED, "80000x60"), _dcgm(m.FB_FREE, "1000x60")) + _busy(),
                  (_dcgm(m.FB_USED, "40000x60"), _dcgm(m.FB_FREE, "41000x60")) + _busy()),
    ]
    return rules


def dcgm_metrics(doc: dict[str, Any]) -> set[str]:
    """Every DCGM exporter metric a rule document's expressions read."""
    return {name for g in doc["groups"] for r in g["rules"] for name in DCGM_METRIC.findall(r["expr"])}


def rules_document(t: Thresholds, stack: str) -> dict[str, Any]:
    """The Prometheus rule file (also the `spec.groups` of a PrometheusRule)."""
    alerts = [{"alert": r.name, "expr": r.expr, "for": f"{r.for_minutes}m",
               "labels": r.labels() | {"stack": stack}, "annotations": r.annotations()}
              for r in alert_rules(t)]
    doc = {"groups": [{"name": "gpufleet.recording", "rules": recording_rules()},
                      {"name": "gpufleet.alerts", "rules": alerts}]}
    unexported = dcgm_metrics(doc) - monitoring_counters.deployed(t.dcgm_version).fields
    if unexported:
        raise GpufleetError(f"the rules read DCGM fields the exporter's counters file does not export: "
                            f"{', '.join(sorted(unexported))} (add them to infra/gpufleet/monitoring/counters.py)")
    return doc


def _eval_minutes(rule: AlertRule) -> int:
    """Five minutes after the alert could first fire; every test series is longer than that."""
    return rule.for_minutes + 5


def unit_tests(t: Thresholds, stack: str, rule_file: str) -> dict[str, dict[str, Any]]:
    """One promtool test file per alert: its firing series raise exactly one alert for the test
    node, its quiet series none."""
    out: dict[str, dict[str, Any]] = {}
    for r in alert_rules(t):
        at = f"{_eval_minutes(r)}m"

        def case(series: tuple[Series, ...], expected: list[dict[str, Any]]) -> dict[str, Any]:
            return {"interval": "1m",
                    "input_series": [{"series": s.selector, "values": s.values} for s in series],
                    "alert_rule_test": [{"eval_time": at, "alertname": r.name, "exp_alerts": expected}]}

        firing = {"exp_labels": r.labels() | {"stack": stack, NODE_LABEL: TEST_NODE},
                  "exp_annotations": r.annotations()}
        out[r.name] = {"rule_files": [rule_file], "evaluation_interval": "1m",
                       "tests": [case(r.fires, [firing]), case(r.quiet, [])]}
    return out
