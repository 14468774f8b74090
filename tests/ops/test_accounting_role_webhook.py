"""`gpufleet ops serve` on the Slurm head node (`playbooks/roles/ops_webhook`) and the head node's
extravars (`gpufleet.rollout.wiring.head_node_extravars`), for real.

The rollout's executor of a real Slurm stack (`dev`, with accounting) hands the controller play
both head-node roles their inputs. The webhook role is applied to this machine with `--check --diff`
on those inputs (as root), writes nothing, and its unit is checked by `systemd-analyze verify`; the
unit is then taken at its word: its ExecStart, Environment and WorkingDirectory start the real
`gpufleet ops serve` on the project files the role would install (read from its diffs), which
answers Alertmanager's endpoint (a malformed notification: 400, never an action).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.monitoring.files import OPS_SERVE, ensure_token
from gpufleet.plan import build_plan
from gpufleet.project import load_project
from gpufleet.rollout.wiring import head_node_extravars, real_executor
from gpufleet.spec import load_stack
from tests.ops.test_accounting_role import check_role
from tests.ops.test_monitoring_roles import _after
from tests.ops.test_slurm_accounting import _free_port, _listening, _wait

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
UNIT = "/etc/systemd/system/gpufleet-ops.service"
OUTPUTS = {"bucket": "gpufleet-dev-artifacts", "slurmControllerIp": "10.0.16.10",
           "slurmControllerInstanceId": "i-0123456789abcdef0",
           "slurmMungeKeySecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpufleet/dev/munge"}


def _project(tmp_path: Path, ops: dict[str, Any] | None) -> Path:
    """A copy of the repository's project whose `dev` stack has these `gpufleet:ops` keys."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for folder in ("stacks", "images"):
        shutil.copytree(REPO / folder, root / folder)
    if ops is not None:
        stack = root / "stacks" / "Pulumi.dev.yaml"
        doc = yaml.safe_load(stack.read_text())
        doc["config"]["gpufleet:ops"] = ops
        stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    return root


def test_a_real_slurm_stacks_controller_play_gets_slurmdbd_and_ops_serve(tmp_path: Path) -> None:
    from importlib.metadata import version

    root = _project(tmp_path, {"slurmAccounting": True, "slurmdbdPort": 6820})
    project = load_project(root)
    spec = load_stack("dev", project.stacks_dir)
    site = real_executor(spec, build_plan(spec), project, "dev", OUTPUTS).site_vars
    assert (site["slurm_accounting_cluster"], site["slurm_accounting_port"]) == (spec.cluster.name, 6820)
    assert site["slurm_accounting_version"] == site["slurm_version"]  # the BOM's pin, as slurmctld's
    assert "AccountingStoragePort=6820" in Path(site["slurm_conf_file"]).read_text()
    # the partition QOS the real slurm.conf names, which the accounting role creates before slurmctld starts
    qos = site["slurm_accounting_partition_qos"]
    assert qos == [f"part-{p.name}" for p in build_plan(spec).partitions if p.blocks] and qos
    assert all(f" QOS={name} " in Path(site["slurm_conf_file"]).read_text() for name in qos)
    assert "\nslurm_accounting_partition_qos:" in (REPO / "playbooks/roles/slurm_accounting/defaults/main.yml").read_text()
    assert (site["ops_webhook_stack"], site["ops_webhook_listen"]) == ("dev", OPS_SERVE)
    assert {f["dest"]: f["src"] for f in site["ops_webhook_project_files"]} == {
        "Pulumi.yaml": str(root / "Pulumi.yaml"), "stacks/Pulumi.dev.yaml": str(root / "stacks" / "Pulumi.dev.yaml"),
        "images/bom.yaml": str(root / "images" / "bom.yaml"), "images/compat.yaml": str(root / "images" / "compat.yaml")}
    assert (site["ops_webhook_wheel"], site["ops_webhook_requirement"]) == ("", f"gpufleet=={version('gpufleet')}")
    # the operator's own build of this version, when the project has one
    wheel = root / "dist" / f"gpufleet-{version('gpufleet')}-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"PK")
    assert head_node_extravars(spec, project, "dev", "24.11.6")["ops_webhook_wheel"] == str(wheel)
    # every extravar is one of the roles' documented inputs
    defaults = {role: (REPO / f"playbooks/roles/{role}/defaults/main.yml").read_text()
                for role in ("slurm_accounting", "ops_webhook")}
    for key in head_node_extravars(spec, project, "dev", "24.11.6"):
        assert f"\n{key}:" in defaults["slurm_accounting" if key.startswith("slurm_accounting") else "ops_webhook"], key


def test_no_accounting_and_a_webhook_elsewhere_leave_the_head_node_alone(tmp_path: Path) -> None:
    root = _project(tmp_path, {"alertWebhookUrl": "https://ops.example.com/gpufleet"})
    project = load_project(root)
    spec = load_stack("dev", project.stacks_dir)
    assert head_node_extravars(spec, project, "dev", "24.11.6") == {}
    site = real_executor(spec, build_plan(spec), project, "dev", OUTPUTS).site_vars
    assert not [k for k in site if k.startswith(("slurm_accounting_", "ops_webhook_"))]


def _unit(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


@pytest.mark.requires_root
@pytest.mark.slow
def test_the_unit_runs_a_real_ops_serve_on_the_files_the_role_installs(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the check run reads apt, dpkg and the user database as root")
    root = _project(tmp_path, None)
    project = load_project(root)
    spec = load_stack("dev", project.stacks_dir)
    port = _free_port()
    home = tmp_path / "head" / "gpufleet"
    for d, mode in (("", 0o755), (".gpufleet", 0o750), (".gpufleet/dev", 0o750), ("stacks", 0o755), ("images", 0o755)):
        (home / d).mkdir(parents=True, exist_ok=True)  # as an earlier converge left them
        (home / d).chmod(mode)
    token_file = ensure_token(tmp_path / "controller" / "webhook.token")  # what monitoring_extravars hands over
    ev = head_node_extravars(spec, project, "dev", "24.11.6") | {"ops_webhook_token_file": str(token_file)} | {
        "ops_webhook_listen": f"127.0.0.1:{port}", "ops_webhook_home": str(home), "ops_webhook_user": "root",
        # this test's own environment, where gpufleet is installed: pip has nothing to do
        "ops_webhook_venv": sys.prefix, "ops_webhook_requirement": "gpufleet",
        "gpufleet_enable_services": False, "gpufleet_live_system": False}
    watched = [UNIT, *(str(p) for p in home.rglob("*")), str(home)]
    before = {p: os.stat(p).st_mtime_ns if os.path.exists(p) else None for p in watched}
    results = check_role(tmp_path, "ops_webhook", ev)
    assert {p: os.stat(p).st_mtime_ns if os.path.exists(p) else None for p in watched} == before, \
        "the check run changed files on the host"
    assert not [r["task"] for r in results if r.get("failed")]
    pip = next(r for r in results if r["task"] == "Install gpufleet into its virtual environment")
    assert not pip.get("changed"), pip

    text = _after(results, UNIT)
    unit = _unit(text)
    assert unit["Restart"] == ["on-failure"] and unit["StandardOutput"] == ["journal"]
    env = dict(v.split("=", 1) for v in unit["Environment"])
    assert env == {"GPUFLEET_SLURM_CLIENT": "local", "GPUFLEET_PROJECT": str(home)}
    argv = shlex.split(unit["ExecStart"][0])
    assert argv == [f"{sys.prefix}/bin/gpufleet", "ops", "serve", "-s", "dev", "--listen", f"127.0.0.1:{port}"]

    analyze = shutil.which("systemd-analyze")
    if analyze:
        units = tmp_path / "units"
        units.mkdir()
        (units / "gpufleet-ops.service").write_text(text)
        verified = subprocess.run([analyze, "verify", "--man=no", str(units / "gpufleet-ops.service")],
                                  capture_output=True, text=True, timeout=120)
        assert verified.returncode == 0, verified.stdout + verified.stderr

    # the files the role would install, as they would be: what ops serve reads
    for item in ev["ops_webhook_project_files"]:
        dest = home / item["dest"]
        dest.write_text(_after(results, str(dest)))
        assert dest.read_text() == Path(item["src"]).read_text()
    token = next(r for r in results if r["task"] == "Install the webhook's bearer token")
    assert not token.get("skipped") and "censored" in token  # it runs, and no_log hides what it copies
    assert token_file.read_text().strip() not in json.dumps(results)
    installed = home / ".gpufleet" / "dev" / "webhook.token"  # where the role puts it, 0600
    installed.write_text(token_file.read_text())
    installed.chmod(0o600)
    stderr = tmp_path / "serve.log"
    proc = subprocess.Popen(argv, cwd=unit["WorkingDirectory"][0], env=dict(os.environ, **env),
                            stdout=subprocess.DEVNULL, stderr=stderr.open("w"))
    try:
        _wait("gpufleet ops serve", lambda: _listening(port), stderr, proc)
        for auth, code in ((None, 401), (f"Bearer {token_file.read_text().strip()}", 400)):
            headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
            request = urllib.request.Request(f"http://127.0.0.1:{port}/", data=json.dumps({"alerts": "no"}).encode(),
                                             headers=headers, method="POST")
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(request, timeout=30)
            assert answer.value.code == code
        assert "not an Alertmanager version-4 notification" in answer.value.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "gpufleet ops serve: stack dev on http://127.0.0.1:" in stderr.read_text()
    audited = [json.loads(line) for line in (home / ".gpufleet" / "dev" / "audit.jsonl").read_text().splitlines()]
    assert [(e["what"], e["details"]["status"]) for e in audited] == [("webhook refused", 401), ("webhook refused", 400)]


def test_a_bom_outside_the_project_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """ops serve reads a copy of the project on the head node: a BOM it cannot copy there is a
    configuration error naming the stack's field, not a unit that fails at its first alert."""
    from gpufleet.errors import ConfigError

    root = _project(tmp_path, None)
    elsewhere = tmp_path / "boms" / "bom.yaml"
    elsewhere.parent.mkdir()
    shutil.copy(root / "images" / "bom.yaml", elsewhere)
    stack = root / "stacks" / "Pulumi.dev.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["config"]["gpufleet:image"]["bom"] = str(elsewhere)
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    project = load_project(root)
    spec = load_stack("dev", project.stacks_dir)
    with pytest.raises(ConfigError) as refused:
        head_node_extravars(spec, project, "dev", "24.11.6")
    assert refused.value.field == "gpufleet:image.bom" and str(elsewhere) in str(refused.value)
