"""The program's own refusals: a simulated stack outside mocks, and any ERROR finding (BOM included)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.program.capture import capture_program
from gpufleet.program.cluster import build_cluster
from gpufleet.errors import ConfigError
from gpufleet.plan import plan_stack
from gpufleet.spec import load_stack

REPO = Path(__file__).resolve().parents[2]


def test_the_real_program_refuses_a_simulated_stack_before_creating_anything(monkeypatch):
    spec = load_stack("local")
    assert spec.simulated
    monkeypatch.setattr("pulumi.get_stack", lambda: "local")
    made: list[str] = []
    monkeypatch.setattr("pulumi_aws.Provider.__init__", lambda *a, **k: made.append("provider"))
    with pytest.raises(ConfigError) as err:
        build_cluster(spec, plan_stack(spec))  # what infra/__main__.py reaches: mocked=False
    text = str(err.value)
    assert "gpufleet rollout -s local" in text and "gpufleet preview --offline -s local" in text
    assert err.value.field == "gpufleet:simulator" and made == []


def test_only_the_mocked_run_lets_a_simulated_stack_through():
    assert capture_program("local", target_batch=1).of_type("aws:ec2/instance:Instance")


def test_the_entry_point_runs_the_unmocked_program(monkeypatch):
    """infra/__main__.py (what `pulumi up` runs) asks for the unmocked program, the path that refuses."""
    import runpy

    import gpufleet.program.cluster as program

    asked: list[bool] = []
    monkeypatch.setattr(program, "run_program", lambda *, mocked: asked.append(mocked))
    runpy.run_path(str(REPO / "infra" / "__main__.py"))
    assert asked == [False]


@pytest.fixture
def bad_bom(tmp_path) -> Path:
    """The project's BOM with fabric manager one release off the driver (a compat rule ERROR)."""
    doc = yaml.safe_load((REPO / "images" / "bom.yaml").read_text())
    doc["components"]["fabric_manager"]["version"] = "570.158.01"
    shutil.copy(REPO / "images" / "compat.yaml", tmp_path / "compat.yaml")
    path = tmp_path / "bom.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_bom_error_stops_the_program(bad_bom):
    image = {"os": "al2023", "bom": str(bad_bom)}
    with pytest.raises(ConfigError, match="1 ERROR finding.*BOM_FABRIC_MANAGER_MISMATCH") as err:
        capture_program("prod", target_batch=1, overrides={"image": image})
    assert err.value.field == "bom.fabric_manager.version"


def test_a_missing_bom_stops_the_program(tmp_path):
    with pytest.raises(ConfigError, match="BOM_INVALID"):
        capture_program("dev", target_batch=1, overrides={"image": {"os": "ubuntu-22.04",
                                                                    "bom": str(tmp_path / "absent.yaml")}})


def test_preview_offline_exits_2_on_a_bom_error(bad_bom, tmp_path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    doc = yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    doc["config"]["gpufleet:image"]["bom"] = str(bad_bom)
    (stacks / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(main, ["preview", "-s", "dev", "--offline", "--stacks-dir", str(stacks)])
    assert result.exit_code == 2, result.output
    assert "BOM_FABRIC_MANAGER_MISMATCH" in result.output


# --- the Slurm controller (pool.type slurm: dev) --------------------------------------------------

def _by_type(cap, typ):
    return [r for r in cap.registrations if r.type == typ]


def test_a_slurm_stack_gets_a_controller_and_no_eks(full_capture):
    cap = full_capture("dev")
    assert not _by_type(cap, "aws:eks/cluster:Cluster")
    component, = _by_type(cap, "gpufleet:slurm:Controller")
    head, = [r for r in _by_type(cap, "aws:ec2/instance:Instance") if r.inputs["tags"]["gpufleet.io/role"] == "slurm-controller"]
    assert head.parent == component.urn and head.options["protect"] and head.options["ignoreChanges"] == ["ami"]
    mgmt = next(r for r in _by_type(cap, "aws:ec2/subnet:Subnet") if r.inputs["tags"]["gpufleet.io/role"] == "subnet-management")
    assert head.inputs["subnetId"] == mgmt.outputs["id"] and head.inputs["associatePublicIpAddress"] is False
    assert "launchTemplate" not in head.inputs and head.inputs["metadataOptions"]["httpTokens"] == "required"
    assert cap.outputs["slurmControllerIp"] == head.outputs["privateIp"]
    assert cap.outputs["slurmControllerInstanceId"] == head.outputs["id"]
    for other in ("prod", "local"):  # kubernetes and sim pools get none
        assert not _by_type(full_capture(other), "gpufleet:slurm:Controller")
        assert "slurmControllerIp" not in full_capture(other).outputs


def test_the_controller_state_lives_on_a_protected_encrypted_volume(full_capture):
    cap = full_capture("dev")
    volume, = _by_type(cap, "aws:ebs/volume:Volume")
    attach, = _by_type(cap, "aws:ec2/volumeAttachment:VolumeAttachment")
    head = next(r for r in _by_type(cap, "aws:ec2/instance:Instance") if r.name.endswith("-head"))
    assert volume.inputs["encrypted"] is True and volume.options["protect"]
    assert volume.inputs["availabilityZone"] == head.inputs["availabilityZone"] == cap.plan.availability_zone
    assert (attach.inputs["volumeId"], attach.inputs["instanceId"]) == (volume.outputs["id"], head.outputs["id"])
    assert cap.outputs["slurmStateVolumeId"] == volume.outputs["id"]


def test_the_controller_group_admits_only_the_node_group(full_capture):
    cap = full_capture("dev")
    sgs = {r.inputs["tags"]["gpufleet.io/role"]: r for r in _by_type(cap, "aws:ec2/securityGroup:SecurityGroup")}
    ctld, node = sgs["slurm-controller"], sgs["node"]
    assert {(r["fromPort"], r["toPort"]) for r in ctld.inputs["ingress"]} == {(6817, 6817), (60001, 63000)}
    for rule in ctld.inputs["ingress"]:
        assert rule["securityGroups"] == [node.outputs["id"]] and not rule.get("cidrBlocks")
    # besides 443 (and 80 to Ubuntu's apt mirrors: dev is Ubuntu), only slurmd and the exporters on the nodes
    assert [(r["fromPort"], r.get("securityGroups")) for r in ctld.inputs["egress"]
            if r["fromPort"] not in (80, 443)] == [(p, [node.outputs["id"]]) for p in (6818, 9100, 9400)]
    mgmt = cap.plan.network.management.cidr
    assert any(r["fromPort"] == 6818 and r["cidrBlocks"] == [mgmt] for r in node.inputs["ingress"])
    assert {r["fromPort"] for r in node.inputs["egress"] if r.get("cidrBlocks") == [mgmt]} == {6817, 60001}
    prod_node = next(r for r in _by_type(full_capture("prod"), "aws:ec2/securityGroup:SecurityGroup")
                     if r.inputs["tags"]["gpufleet.io/role"] == "node")
    assert not any(r["fromPort"] in (6817, 6818) for r in prod_node.inputs["ingress"] + prod_node.inputs["egress"])


def test_the_munge_key_secret_is_created_empty_and_only_the_controller_may_write_it(full_capture):
    cap = full_capture("dev")
    secret, = _by_type(cap, "aws:secretsmanager/secret:Secret")
    assert secret.inputs["name"] == "/gpufleet/dev/munge-key" and secret.options["protect"]
    assert not _by_type(cap, "aws:secretsmanager/secretVersion:SecretVersion")  # no value in Pulumi state
    policies = {r.name: json.loads(r.inputs["policy"]) for r in _by_type(cap, "aws:iam/rolePolicy:RolePolicy")}
    writers = [n for n, doc in policies.items()
               if any("secretsmanager:PutSecretValue" in s["Action"] for s in doc["Statement"])]
    assert writers == ["dev-slurm-munge"]
    statement, = policies["dev-slurm-munge"]["Statement"]
    assert statement["Resource"] == [secret.outputs["arn"]]
    node_reads = next(s for s in policies["dev-identity-data"]["Statement"] if s["Sid"] == "OwnSecrets")
    assert any(secret.inputs["name"].startswith(r.split(":secret:")[1].rstrip("*")) for r in node_reads["Resource"])
    assert cap.outputs["slurmMungeKeySecretArn"] == secret.outputs["arn"]
