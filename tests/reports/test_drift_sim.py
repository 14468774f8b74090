"""`gpufleet drift` on a simulated stack, end to end through the command: the simulator answers as
cloud and nodes; injected drift shows in the layer it belongs to, named; a clean fleet exits 0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.plan import build_plan
from gpufleet.reports import drift_cloud as dc
from gpufleet.spec import load_stack_path
from tests.sim.conftest import make_project, open_cloud

STACK = "audit20"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "drift" / f"Pulumi.{STACK}.yaml"
FAULTY = ("audit20-b0000-n00000", "audit20-b0002-n00014")  # seeded version skew, unreachable


@pytest.fixture
def clean_fleet(tmp_path):
    """Every slot launched, the two seeded faulty nodes replaced by healthy ones."""
    project = make_project(tmp_path / "proj")
    shutil.copy(FIXTURE, project.stacks_dir / FIXTURE.name)
    spec = load_stack_path(project.stack_file(STACK))
    plan = build_plan(spec)
    cloud = open_cloud(spec, project, STACK)
    cloud.provisioner.provision(len(plan.batches), plan.nodes)
    for slot in FAULTY:
        cloud.provisioner.replace(cloud.slots[slot], "stop-and-report")
    return project, cloud


def _drift(project, *args):
    return CliRunner().invoke(main, ["--project", str(project.root), "drift", "-s", STACK, "--json", *args])


def _inject(project, *args):
    r = CliRunner().invoke(main, ["--project", str(project.root), "sim", "inject", "-s", STACK, *args])
    assert r.exit_code == 0, r.output


def test_a_clean_simulated_fleet_has_no_drift(clean_fleet):
    project, _ = clean_fleet
    r = _drift(project)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "ok" and doc["schema_version"] == 1
    assert [(x["layer"], x["status"]) for x in doc["layers"]] == [
        ("cloud", "clean"), ("software", "clean"), ("performance", "clean")]
    assert "No baselines stored yet" in doc["layers"][2]["notes"][0]  # no rollout ran: nothing measured


def test_injected_drift_is_reported_in_its_layer_and_named(clean_fleet):
    project, _ = clean_fleet
    _inject(project, "--orphans", "1")
    _inject(project, "--cloud-change", "instanceType=p5e.48xlarge", "--slot", "audit20-b0001-n00006")
    _inject(project, "--skew", "aws_ofi_nccl=1.14.2", "--changed-task", "aws_ofi_nccl : Install the plugin",
            "--slot", "audit20-b0003-n00019")
    r = _drift(project)
    assert r.exit_code == 4, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "drift"
    layers = {x["layer"]: x for x in doc["layers"]}
    assert layers["performance"]["status"] == "clean"
    cloud_found = sorted((f["check"], f["field"], f["expected"], f["found"]) for f in layers["cloud"]["findings"])
    assert cloud_found == [
        (dc.CLOUD_VS_STATE, "instanceType", "p5.48xlarge", "p5e.48xlarge"),
        (dc.ORPHAN, "instance", "not in the cloud", "p5.48xlarge running"),
    ]
    soft = sorted((f["check"], f["subject"], f["field"], f["expected"], f["found"])
                  for f in layers["software"]["findings"])
    assert soft == [
        ("check-mode", "audit20-b0003-n00019", "aws_ofi_nccl : Install the plugin", "unchanged", "would change"),
        ("mixed-versions", "block 3", "aws_ofi_nccl", None, "1.14.2 (1), 1.16.3 (4)"),
        ("mixed-versions", "partition eval", "aws_ofi_nccl", None, "1.14.2 (1), 1.16.3 (9)"),
        ("version", "audit20-b0003-n00019", "aws_ofi_nccl", "1.16.3", "1.14.2"),
    ]
    # the worst finding first
    assert doc["layers"][1]["findings"][0]["severity"] == "critical"
    md = (project.reports_dir(STACK) / "drift.md").read_text()
    assert "audit20-b0003-n00019" in md and "p5e.48xlarge" in md


def test_one_layer_only(clean_fleet):
    project, _ = clean_fleet
    _inject(project, "--orphans", "2")
    r = _drift(project, "--layer", "software")
    assert r.exit_code == 0, r.output  # the orphans are the cloud layer's, not asked for
    assert [x["status"] for x in json.loads(r.stdout)["layers"]] == ["skipped", "clean", "skipped"]
    r = _drift(project, "--layer", "cloud", "--layer", "software")
    assert r.exit_code == 4
