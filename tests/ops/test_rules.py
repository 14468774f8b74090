"""The generated rules with the real promtool: they check, their generated unit tests pass (each
alert fires on its bad series and stays quiet on its good one), and the tests are not vacuous."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.monitoring import counters as monitoring_counters, metrics
from gpufleet.monitoring.rules import Thresholds, alert_rules, rules_document, unit_tests
from gpufleet.spec import OpsConfig

DEFAULT_COUNTERS = Path(__file__).parent / "fixtures" / "dcgm-exporter-default-counters.csv"


def _write(folder: Path, t: Thresholds) -> list[Path]:
    (folder / "rules.yml").write_text(yaml.safe_dump(rules_document(t, "s")))
    out = []
    for name, doc in unit_tests(t, "s", "rules.yml").items():
        out.append(folder / f"{name}.test.yml")
        out[-1].write_text(yaml.safe_dump(doc))
    return out


def _promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_command_writes_rules_that_check_and_tests_that_pass(tmp_path: Path, promtool: str) -> None:
    out = tmp_path / "ops"
    result = CliRunner().invoke(main, ["ops", "rules", "-s", "local", "--out", str(out)])
    assert result.exit_code == 0, result.output
    checked = _promtool(promtool, "check", "rules", "gpufleet-rules.yml", cwd=out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tests = sorted(p.name for p in (out / "tests").glob("*.test.yml"))
    rules = yaml.safe_load((out / "gpufleet-rules.yml").read_text())
    assert len(tests) == len(rules["groups"][1]["rules"]) >= 15
    ran = _promtool(promtool, "test", "rules", *tests, cwd=out / "tests")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    config = _promtool(promtool, "check", "config", "prometheus.yml", cwd=out)
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_generated_tests_fail_against_rules_of_other_thresholds(tmp_path: Path, promtool: str) -> None:
    """Tests written for one remap limit and utilisation range fail against rules generated with others."""
    base = Thresholds(OpsConfig(), 512, "4.2.3", "/fsx")
    tests = _write(tmp_path, base)
    other = Thresholds(OpsConfig(util_min_percent=30, util_max_percent=99.5), 600, "4.2.3", "/fsx")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules_document(other, "s")))
    failing = {p.stem.removesuffix(".test") for p in tests
               if _promtool(promtool, "test", "rules", p.name, cwd=tmp_path).returncode != 0}
    assert failing == {"GpuRowRemapExhausted", "GpuUtilisationLow", "GpuUtilisationHigh"}


def test_thresholds_come_from_the_gates_and_the_stack() -> None:
    from gpufleet.gates.xid import XID_RULES
    from gpufleet.gates.verdict import Verdict

    rules = {r.name: r for r in alert_rules(Thresholds(OpsConfig(util_min_percent=55), 300, "4.2.3", None))}
    fatal = [x for x, r in XID_RULES.items() if r.verdict is Verdict.QUARANTINE]
    assert all(f"== {x}" in rules["GpuXidFatal"].expr for x in fatal)
    assert "> 300" in rules["GpuRowRemapExhausted"].expr
    assert "< 55" in rules["GpuUtilisationLow"].expr
    assert "LustreMountMissing" not in rules  # no Lustre, no rule
    legacy = {r.name: r for r in alert_rules(Thresholds(OpsConfig(), 512, "3.2.6", "/fsx"))}
    assert metrics.CLOCK_THROTTLE_LEGACY in legacy["GpuHardwareSlowdown"].expr


def test_every_dcgm_metric_is_a_dcgm_exporter_field() -> None:
    """Names checked against dcgm-exporter's own default counters file (copied, see SOURCES.md);
    the ones it ships commented out are exactly those our counters file switches on."""
    shipped, commented = set(), set()
    for line in DEFAULT_COUNTERS.read_text().splitlines():
        field = line.lstrip("# ").split(",")[0].strip()
        if field.startswith("DCGM_FI_"):
            (commented if line.startswith("#") else shipped).add(field)
    ours = {line.split(",")[0].strip() for line in monitoring_counters.deployed_csv("4.2.3").splitlines() if line.startswith("DCGM_FI_")}
    assert ours - shipped == {metrics.ECC_DBE_VOLATILE, metrics.NVLINK_CRC_FLIT, metrics.CLOCK_EVENTS}
    assert {metrics.ECC_DBE_VOLATILE, metrics.NVLINK_CRC_FLIT} <= commented


def test_a_kubernetes_stack_gets_the_same_groups_as_a_prometheus_rule(tmp_path: Path, promtool: str) -> None:
    out = tmp_path / "prod"
    result = CliRunner().invoke(main, ["ops", "rules", "-s", "prod", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rule = yaml.safe_load((out / "prometheusrule.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((out / "gpufleet-rules.yml").read_text())
    (tmp_path / "spec.yml").write_text(yaml.safe_dump(rule["spec"]))
    checked = _promtool(promtool, "check", "rules", "spec.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (out / "prometheus.yml").exists()  # the cluster's Prometheus discovers its own targets
