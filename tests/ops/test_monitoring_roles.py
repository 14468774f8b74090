"""The Slurm monitoring roles, for real: `monitoring_exporters` (dcgm-exporter and node_exporter on
GPU nodes) and `monitoring_server` (Prometheus and Alertmanager on the head node) applied to this
machine with `--check --diff` (as root: the check reads /etc and the user database), from the
files gpufleet generates (`gpufleet.monitoring.files`). The run must not fail and must write
nothing; the files it would install are read from its diffs, and the head node's configuration
they make up (prometheus.yml, the rules, the file_sd targets built from the inventory) passes the
real `promtool check config`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

from gpufleet.bom import load_bom
from gpufleet.monitoring import counters as monitoring_counters, scrape
from gpufleet.monitoring.files import FILES, documents, monitoring_extravars
from gpufleet.monitoring.rules import Thresholds
from gpufleet.spec import load_stack

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SLOT = "local-slurm-b0000-n00000"
EARLIER = "local-slurm-b0001-n00005"  # a node an earlier batch's configure run wrote into the targets
STACK = "local-slurm"

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]


def _thresholds(spec) -> Thresholds:
    return Thresholds(spec.ops, 512, load_bom(REPO / "images" / "bom.yaml").components.dcgm.version, spec.storage.mount_path)


def test_the_generated_files_are_the_reviewed_documents_and_the_extravars_name_them(tmp_path: Path) -> None:
    spec = load_stack(STACK)
    bom = load_bom(REPO / "images" / "bom.yaml")
    ev = monitoring_extravars(spec, bom, _thresholds(spec), STACK, tmp_path / "monitoring")
    assert ev["monitoring_exporters_dcgm_exporter_version"] == bom.monitoring.dcgm_exporter
    assert ev["monitoring_server_prometheus_version"] == bom.monitoring.prometheus
    written = {p.name: p.read_text() for p in (tmp_path / "monitoring").iterdir()}
    assert written == documents(spec, _thresholds(spec), STACK)
    assert written[FILES["counters"]] == monitoring_counters.deployed_csv(bom.components.dcgm.version)
    route = yaml.safe_load(written[FILES["alertmanager"]])
    assert route["receivers"][0]["webhook_configs"][0]["url"] == "http://127.0.0.1:9797/"  # ops serve on the head
    # Alertmanager sends the stack's bearer token, read from the file the role installs
    assert route["receivers"][0]["webhook_configs"][0]["http_config"] == {
        "authorization": {"type": "Bearer", "credentials_file": "/etc/alertmanager/gpufleet-webhook.token"}}
    token = Path(ev["monitoring_server_webhook_token_file"])
    assert token == tmp_path / "webhook.token" == Path(ev["ops_webhook_token_file"])
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text().strip()) >= 40
    assert token.read_text().strip() not in "".join(written.values())
    defaults = {role: (REPO / f"playbooks/roles/{role}/defaults/main.yml").read_text()
                for role in ("monitoring_exporters", "monitoring_server", "ops_webhook")}
    for key in ev:  # every extravar is one of the roles' documented inputs
        assert f"\n{key}:" in defaults[key.split("_")[0] + "_" + key.split("_")[1]], key


WATCHED = ("/etc/systemd/system/node_exporter.service", "/etc/dcgm-exporter/gpufleet-counters.csv",
           "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpufleet.conf", "/etc/alertmanager/alertmanager.yml",
           "/etc/systemd/system/prometheus.service", "/opt/gpufleet")


def _state(paths: tuple[str, ...]) -> dict[str, tuple[int, int] | None]:
    """Each path's (mtime_ns, size), or None when absent: Debian's prometheus may own /etc/prometheus here."""
    out: dict[str, tuple[int, int] | None] = {}
    for p in paths:
        try:
            st = Path(p).stat()
            out[p] = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            out[p] = None
    return out


def _release(root: Path, name: str, version: str, binaries: tuple[str, ...]) -> None:
    """A release folder as github.com/prometheus/<name>/releases/download/v<version>/ serves it."""
    folder = root / name / "releases" / "download" / f"v{version}"
    folder.mkdir(parents=True)
    top = f"{name}-{version}.linux-amd64"
    tarball = folder / f"{top}.tar.gz"
    src = root / "src" / top
    src.mkdir(parents=True)
    for b in binaries:
        (src / b).write_text("#!/bin/sh\n")
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src, arcname=top)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    (folder / "sha256sums.txt").write_text(f"{digest}  {tarball.name}\n")


def _check_run(tmp_path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if os.geteuid() != 0:
        pytest.skip("the check run reads /etc and the user database as root")
    spec = load_stack(STACK)
    bom = load_bom(REPO / "images" / "bom.yaml")
    ev = monitoring_extravars(spec, bom, _thresholds(spec), STACK, tmp_path / "monitoring")
    mirror = tmp_path / "mirror"
    _release(mirror, "node_exporter", bom.monitoring.node_exporter, ("node_exporter",))
    _release(mirror, "prometheus", bom.monitoring.prometheus, ("prometheus", "promtool"))
    _release(mirror, "alertmanager", bom.monitoring.alertmanager, ("alertmanager",))
    ev |= {"monitoring_exporters_node_exporter_base_url": f"file://{mirror}/node_exporter/releases/download",
           "monitoring_server_base_url": f"file://{mirror}", "gpufleet_enable_services": False,
           # as in a check run of site.yml on a fresh node: the GPU play only planned the CUDA repository
           "gpufleet_live_system": False, "nvidia_driver_repo_added": True}
    playbook = tmp_path / "monitoring.yml"
    playbook.write_text(yaml.safe_dump([
        {"name": "Node", "hosts": "slurm", "gather_facts": True, "gather_subset": ["min", "network"], "roles": [{"role": "monitoring_exporters"}]},
        {"name": "Head", "hosts": "slurm_controller", "gather_facts": False, "roles": [{"role": "monitoring_server"}]},
    ]))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {SLOT: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "children": {"slurm": {"hosts": {SLOT: None}}, "slurm_controller": {"hosts": {SLOT: None}}}}}))
    # the head node's Prometheus folder as an earlier batch left it: one node of its own, and this
    # run's slot at the address of the instance it had before a replacement
    prom = tmp_path / "etc-prometheus"
    (prom / "targets").mkdir(parents=True)
    for job, port in (("dcgm-exporter", 9400), ("node-exporter", 9100)):
        (prom / "targets" / f"{job}.json").write_text(json.dumps(
            [{"targets": [f"10.0.0.9:{port}"], "labels": {"node": EARLIER}},
             {"targets": [f"10.0.0.77:{port}"], "labels": {"node": SLOT}}]))
    ev["monitoring_server_prometheus_dir"] = str(prom)
    watched = (*WATCHED, str(prom / "targets" / "dcgm-exporter.json"), str(prom / "targets" / "node-exporter.json"))
    before = _state(watched)
    (tmp_path / "runner").mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"), project_dir=str(tmp_path), playbook=playbook.name,
        inventory=str(inventory), extravars=ev, cmdline="--check --diff", quiet=True, timeout=300,
        suppress_env_files=True,
        envvars={"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"), "ANSIBLE_NOCOLOR": "1",
                 "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    log = (tmp_path / "runner" / "artifacts").rglob("stdout")
    assert runner.rc == 0, "\n".join(p.read_text()[-6000:] for p in log)
    results = [{"task": e["event_data"].get("task"), **e["event_data"]["res"],
                "failed": e["event"] == "runner_on_failed"}
               for e in runner.events if e["event"] in ("runner_on_ok", "runner_on_failed")]
    assert _state(watched) == before, "the check run changed files on the host"
    return results, ev


@pytest.fixture(scope="module")
def check_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return _check_run(tmp_path_factory.mktemp("monitoring-roles"))


def _after(results: list[dict[str, Any]], dest: str) -> str:
    """The content a copy or template task would have written to `dest` (its --diff), through loops too."""
    for r in results:
        for item in r.get("results", [r]):
            diff = item.get("diff")
            for d in diff if isinstance(diff, list) else [diff or {}]:
                if item.get("invocation", {}).get("module_args", {}).get("dest") == dest and "after" in d:
                    return d["after"]
    raise AssertionError(f"no task would write {dest}")


def test_the_check_run_fails_nothing_and_writes_nothing(check_run) -> None:
    """(What it wrote is compared in the fixture: every watched path as it was before the run.)"""
    results, _ = check_run
    assert results and not [r["task"] for r in results if r.get("failed")]
    would_change = {r["task"] for r in results if r.get("changed")}
    assert {"Install the counters file gpufleet generated", "Install the node_exporter unit",
            "Write the scrape targets from the inventory"} <= would_change


def test_the_exporters_would_run_on_the_generated_counters_at_the_stacks_ports(check_run) -> None:
    results, ev = check_run
    counters = _after(results, "/etc/dcgm-exporter/gpufleet-counters.csv")
    assert counters == Path(ev["monitoring_exporters_counters_file"]).read_text()
    override = _after(results, "/etc/systemd/system/nvidia-dcgm-exporter.service.d/gpufleet.conf")
    assert "ExecStart=\nExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/gpufleet-counters.csv -a :9400" in override
    unit = _after(results, "/etc/systemd/system/node_exporter.service")
    assert f"/opt/gpufleet/node_exporter-{ev['monitoring_exporters_node_exporter_version']}.linux-amd64/node_exporter " \
           "--web.listen-address=:9100" in unit and "User=node_exporter" in unit


def test_the_head_nodes_configuration_passes_promtool(check_run, tmp_path: Path) -> None:
    from tests.ops.conftest import ensure_tool

    results, ev = check_run
    prom = ev["monitoring_server_prometheus_dir"]
    etc = tmp_path / "etc-prometheus"
    (etc / "targets").mkdir(parents=True)
    for name in ("prometheus.yml", "gpufleet-rules.yml"):
        (etc / name).write_text(_after(results, f"{prom}/{name}"))
    for job, port in (("dcgm-exporter", 9400), ("node-exporter", 9100)):
        rendered = json.loads(_after(results, f"{prom}/targets/{job}.json"))
        # the earlier batch's node kept; this run's slot at its gathered address, not the old one;
        # labelled by slot like `gpufleet ops rules` writes them
        assert [t["labels"] for t in rendered] == [{"node": SLOT}, {"node": EARLIER}]
        assert rendered[1]["targets"] == [f"10.0.0.9:{port}"]
        (expected,) = scrape.targets([SLOT], port)
        assert rendered[0]["labels"] == expected["labels"] and rendered[0]["targets"] != [f"10.0.0.77:{port}"]
        assert rendered[0]["targets"][0].endswith(f":{port}")
        (etc / "targets" / f"{job}.json").write_text(json.dumps(rendered))
    checked = subprocess.run([ensure_tool("promtool"), "check", "config", "prometheus.yml"], cwd=etc,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout + checked.stderr
    route = yaml.safe_load(_after(results, "/etc/alertmanager/alertmanager.yml"))
    assert route["route"]["receiver"] == "gpufleet"


def test_a_real_slurm_stacks_configure_runs_carry_the_monitoring_files(tmp_path: Path) -> None:
    """The rollout's executor for a real Slurm stack (`dev`) passes both roles their inputs."""
    import shutil

    from gpufleet.plan import build_plan
    from gpufleet.project import load_project
    from gpufleet.rollout.wiring import real_executor

    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    for folder in ("stacks", "images"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    project = load_project(tmp_path)
    spec = load_stack("dev", project.stacks_dir)
    outputs = {"bucket": "gpufleet-dev-artifacts", "slurmControllerIp": "10.0.16.10",
               "slurmControllerInstanceId": "i-0123456789abcdef0",
               "slurmMungeKeySecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpufleet/dev/munge"}
    executor = real_executor(spec, build_plan(spec), project, "dev", outputs)
    folder = project.state_dir("dev") / "monitoring"
    assert executor.site_vars["monitoring_server_config_dir"] == str(folder)
    assert Path(executor.site_vars["monitoring_exporters_counters_file"]).read_text() == \
        monitoring_counters.deployed_csv(load_bom(tmp_path / "images" / "bom.yaml").components.dcgm.version)
    assert {p.name for p in folder.iterdir()} == set(FILES.values())
    assert executor.site_vars["slurm_conf_file"]  # beside the Slurm configuration, not instead of it
