"""The drift report's cloud layer: Pulumi preview/refresh event-log replays through the real
Automation API (a fake `PulumiCommand` is the only stand-in, as in tests/rollout), and the boto3
scan for what Pulumi does not know against a real moto server.

The moto-backed stack: a VPC, a subnet, the EFA security group (self-referencing all-traffic rules,
the provider's default egress removed as Pulumi does), a launch template, two instances launched
from it and tagged for the stack; the state document lists exactly these. Drift is then made by
hand the way operators make it: an instance launched outside Pulumi, an SSH rule added to the
group, an instance stopped and resized.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult
from pulumi.automation.errors import create_command_error
from semver import VersionInfo

from gpufleet import tagging as t
from gpufleet.cli import main
from gpufleet.project import Project
from gpufleet.reports import drift_cloud as dc
from gpufleet.reports.drift import DriftReport, LayerStatus, drift_document
from gpufleet.plan import build_plan
from gpufleet.reports.drift_run import DriftOptions, cloud_layer, run_drift
from gpufleet.reports.sources import Ec2Scanner, Sources, real_sources
from gpufleet.reports.write import render_all
from gpufleet.spec import load_stack
from tests.sim.conftest import make_project
from tests.unit.moto_server import moto_client, moto_endpoint  # noqa: F401, F811 (pytest fixtures)

EVENTS = Path(__file__).resolve().parents[1] / "fixtures" / "drift" / "pulumi_events"
STACK = "gpu"
CANARY = "canary-7f3a9c-munge"
HISTORY = [{"kind": "refresh", "startTime": "2026-11-30T23:00:00.000Z", "endTime": "2026-11-30T23:01:00.000Z",
            "message": "", "environment": {}, "config": {}, "result": "succeeded", "resourceChanges": {}}]
REGION, AZ, AMI_TYPE = "us-east-1", "us-east-1a", "p5.48xlarge"


class FakePulumi(auto.PulumiCommand):
    """A `pulumi` CLI that records argv, replays scripted event logs and serves a state document."""

    def __init__(self, previews=(), refreshes=(), state: dict | None = None) -> None:  # no super(): it would exec pulumi
        self.command = "pulumi"
        self.version = VersionInfo.parse("3.200.0")  # <= 3.205: the engine events go through --event-log
        self.calls: list[list[str]] = []
        self.scripts = {"preview": list(previews), "refresh": list(refreshes)}
        self.state = state or {"version": 3, "deployment": {"manifest": {}, "resources": []}}

    def run(self, args, cwd, additional_env, on_output=None, on_error=None) -> CommandResult:
        args = list(args)
        self.calls.append(args)
        out, err, code = self._answer(args)
        result = CommandResult(stdout=out, stderr=err, code=code)
        if code:
            raise create_command_error(result)
        return result

    def _answer(self, a: list[str]) -> tuple[str, str, int]:
        if a[:2] == ["stack", "select"]:
            return "", "", 0
        if a[0] in self.scripts:
            fixture, code, stderr = self.scripts[a[0]].pop(0)
            Path(a[a.index("--event-log") + 1]).write_text((EVENTS / fixture).read_text())
            return "", stderr, code
        if a[:2] == ["stack", "history"]:
            return json.dumps(HISTORY), "", 0
        if a[:2] == ["stack", "export"]:
            return json.dumps(self.state), "", 0
        raise AssertionError(f"unexpected pulumi call {a}")


def _sources(tmp_path: Path, fake: FakePulumi, ec2: Any = None) -> Sources:
    project = Project(root=tmp_path, name="gpufleet", stacks_dir=tmp_path / "stacks")
    return real_sources(load_stack("dev"), project, STACK, pulumi_command=fake,
                        ec2=ec2 or _NoEc2())


class _NoEc2:
    """An EC2 client for tests whose state holds nothing to scan: the one query that still runs
    (instances tagged for the stack) finds none; any other call is a test failure."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def describe_instances(self, **kw: Any) -> dict:
        self.calls.append(kw)
        return {"Reservations": []}

    def __getattr__(self, name: str) -> Any:
        pytest.fail(f"no EC2 call expected, got {name}")


NO_CHANGES = "error: no changes were expected but changes were proposed\n"


def _cloud(sources: Sources, now=None):
    from datetime import datetime, timezone

    return cloud_layer(load_stack("dev"), sources, now or datetime(2026, 12, 1, tzinfo=timezone.utc), DriftOptions())


# ------------------------------------------------------------------ event-log replays

def test_a_clean_preview_and_refresh_are_no_drift_and_run_the_expected_commands(tmp_path):
    fake = FakePulumi(previews=[("preview-clean.jsonl", 0, "")], refreshes=[("refresh-clean.jsonl", 0, "")])
    result = _cloud(_sources(tmp_path, fake))
    assert result.status is LayerStatus.CLEAN and result.findings == [] and result.errors == []
    assert result.checks == [dc.CODE_VS_STATE, dc.CLOUD_VS_STATE, dc.ORPHAN, "sg-rules", dc.LT_MISMATCH, dc.CAPACITY]
    verbs = [c[0] if c[0] in ("preview", "refresh") else " ".join(c[:2]) for c in fake.calls]
    assert verbs == ["stack select", "preview", "refresh", "stack history", "stack export"]
    preview, refresh = fake.calls[1], fake.calls[2]
    assert "--expect-no-changes" in preview and "--preview-only" in refresh and "--yes" not in refresh
    assert not any("--show-secrets" in c for c in fake.calls)  # secrets stay encrypted in every answer


def test_code_vs_state_names_each_resource_and_field_and_never_a_secret(tmp_path):
    fake = FakePulumi(previews=[("preview-changed.jsonl", 255, NO_CHANGES)], refreshes=[("refresh-clean.jsonl", 0, "")])
    result = _cloud(_sources(tmp_path, fake))
    assert result.status is LayerStatus.DRIFT and result.errors == []
    got = {(f.check, f.subject, f.field, f.expected, f.found) for f in result.findings}
    assert got == {
        (dc.CODE_VS_STATE, "aws:ec2/launchTemplate:LaunchTemplate::gpu-compute-p5-48xlarge", "imageId",
         "ami-0a1b2c3d4e5f60002", "ami-0a1b2c3d4e5f60001"),
        (dc.CODE_VS_STATE, "aws:secretsmanager/secretVersion:SecretVersion::gpu-munge-key", "secretString",
         "[secret]", "[secret]"),
        (dc.CODE_VS_STATE, "aws:ec2/instance:Instance::gpu-b0001-n00002", "", None, None),
    }
    create = next(f for f in result.findings if f.subject.endswith("n00002"))
    assert "in code, not in the state" in create.message
    report = DriftReport(stack=STACK, generated_at=_now(), layers=[result])
    rendered = render_all(drift_document(report), report, ["json", "md", "xml", "html"])
    assert all(CANARY not in text for text in rendered.values())
    assert '"found": "[secret]"' in rendered["json"]


def test_cloud_vs_state_shows_a_resized_instance_and_one_gone_from_the_cloud(tmp_path):
    fake = FakePulumi(previews=[("preview-clean.jsonl", 0, "")], refreshes=[("refresh-drift.jsonl", 0, "")])
    result = _cloud(_sources(tmp_path, fake))
    got = sorted((f.check, f.subject, f.field, f.expected, f.found, f.severity.value) for f in result.findings)
    assert got == [
        (dc.CLOUD_VS_STATE, "aws:ec2/instance:Instance::gpu-b0000-n00000", "instanceType", "p5.48xlarge",
         "p5e.48xlarge", "high"),
        (dc.CLOUD_VS_STATE, "aws:ec2/instance:Instance::gpu-b0000-n00000", "userData", "[secret]", "[secret]", "high"),
        (dc.CLOUD_VS_STATE, "aws:ec2/instance:Instance::gpu-b0000-n00001", "", None, None, "critical"),
    ]
    gone = next(f for f in result.findings if f.subject.endswith("n00001"))
    assert "gone from the cloud" in gone.message


def test_a_failed_program_is_a_layer_that_could_not_run_never_clean(tmp_path):
    fake = FakePulumi(previews=[("preview-program-error.jsonl", 255, "error: update failed\n")],
                      refreshes=[("refresh-clean.jsonl", 0, "")])
    result = _cloud(_sources(tmp_path, fake))
    assert result.status is LayerStatus.ERROR
    assert result.checks[0] == dc.CLOUD_VS_STATE  # the other checks still ran
    [error] = result.errors
    assert error.startswith("code-vs-state: pulumi preview --expect-no-changes failed") and "credential" in error


def test_a_missing_pulumi_cli_fails_the_layers_that_need_it_and_only_those(tmp_path):
    project = make_project(tmp_path / "proj")

    class Broken(auto.PulumiCommand):
        def __init__(self) -> None:  # no super(): it would exec pulumi
            self.command, self.version = "pulumi", VersionInfo.parse("3.200.0")

        def run(self, *a, **kw):
            raise FileNotFoundError(2, "No such file or directory", "pulumi")
    sources = real_sources(load_stack("dev"), project, STACK, pulumi_command=Broken(), ec2=_NoEc2())
    report = run_drift(load_stack("dev"), build_plan(load_stack("dev")), project, STACK, sources, DriftOptions(), _now())
    cloud, software, performance = report.layers
    assert cloud.status is LayerStatus.ERROR and len(cloud.errors) == 3
    assert all("pulumi stack select gpu failed" in e for e in cloud.errors)
    # the node list comes from the state too: the software layer cannot run either, and says so
    assert software.status is LayerStatus.ERROR and software.checks == []
    assert software.errors[0].startswith("version, check-mode: pulumi stack select gpu failed")
    assert performance.status is LayerStatus.CLEAN  # the stored baselines need no Pulumi
    assert report.status.value == "error"


def _now():
    from datetime import datetime, timezone

    return datetime(2026, 12, 1, tzinfo=timezone.utc)


# ------------------------------------------------------------------ the boto3 scan against moto

def _stack_tags(slot: str | None = None) -> list[dict[str, str]]:
    tags = {t.STACK: STACK, t.CLUSTER: STACK, t.MANAGED_BY: t.MANAGED_BY_VALUE}
    if slot:
        tags.update({t.SLOT: slot, t.BATCH: "1", t.BLOCK: "0", t.ROLE: "gpu-node", "Name": slot})
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _res(typ: str, name: str, rid: str, outputs: dict) -> dict:
    return {"urn": f"urn:pulumi:{STACK}::gpufleet::{typ}::{name}", "type": typ, "id": rid, "custom": True,
            "outputs": {"id": rid, **outputs}}


@pytest.fixture
def moto_stack(moto_endpoint, moto_client):
    """A stack built in moto the way the program builds it, and its state document (on a freshly
    reset server: the server is shared by the module, the stacks must not be)."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")).close()
    ec2 = moto_client("ec2", REGION)
    ami = "ami-0a1b2c3d4e5f60001"  # moto launches any AMI id; listing its catalogue takes seconds
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20", AvailabilityZone=AZ)["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName=f"{STACK}-efa", Description="EFA", VpcId=vpc)["GroupId"]
    everything = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": sg}]}]
    ec2.revoke_security_group_egress(GroupId=sg, IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
    ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=everything)
    ec2.authorize_security_group_egress(GroupId=sg, IpPermissions=everything)
    lt = ec2.create_launch_template(LaunchTemplateName="gpu-compute-p5-48xlarge",
                                    LaunchTemplateData={"ImageId": ami, "InstanceType": AMI_TYPE})["LaunchTemplate"]
    instances = {}
    for slot in ("gpu-b0000-n00000", "gpu-b0000-n00001"):
        i = ec2.run_instances(MinCount=1, MaxCount=1, SubnetId=subnet, SecurityGroupIds=[sg],
                              LaunchTemplate={"LaunchTemplateId": lt["LaunchTemplateId"], "Version": "1"},
                              TagSpecifications=[{"ResourceType": "instance", "Tags": _stack_tags(slot)}])["Instances"][0]
        instances[slot] = i["InstanceId"]
    rule = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True, "cidrBlocks": [], "ipv6CidrBlocks": [],
            "prefixListIds": [], "securityGroups": []}
    resources = [
        _res("aws:ec2/vpc:Vpc", f"{STACK}-vpc", vpc, {"cidrBlock": "10.0.0.0/16"}),
        _res(dc.SUBNET_TYPE, f"{STACK}-compute", subnet, {"cidrBlock": "10.0.0.0/20", "vpcId": vpc}),
        _res(dc.SG_TYPE, f"{STACK}-efa", sg, {"ingress": [rule], "egress": [rule], "vpcId": vpc}),
        _res("aws:ec2/launchTemplate:LaunchTemplate", "gpu-compute-p5-48xlarge", lt["LaunchTemplateId"],
             {"imageId": ami, "instanceType": AMI_TYPE, "latestVersion": 1}),
        *[_res(dc.INSTANCE_TYPE, slot, iid, {
            "ami": ami, "instanceType": AMI_TYPE, "subnetId": subnet,
            "launchTemplate": {"id": lt["LaunchTemplateId"], "name": "gpu-compute-p5-48xlarge", "version": "1"},
            "tags": {x["Key"]: x["Value"] for x in _stack_tags(slot)}}) for slot, iid in instances.items()],
    ]
    state = {"version": 3, "deployment": {"manifest": {}, "resources": resources}}
    return ec2, state, {"sg": sg, "subnet": subnet, "ami": ami, "instances": instances}


def _scan_findings(ec2, state) -> list:
    view = dc.state_view(state)
    return dc.unmanaged_findings(view, Ec2Scanner(ec2, STACK).scan(view, ()), _now(), dc_hours(72))


def dc_hours(h: float):
    from datetime import timedelta

    return timedelta(hours=h)


def test_a_moto_stack_as_deployed_has_nothing_pulumi_does_not_know(moto_stack):
    ec2, state, _ = moto_stack
    assert _scan_findings(ec2, state) == []


def test_an_orphan_a_hand_added_rule_and_a_resized_instance_are_exactly_the_three_findings(moto_stack):
    ec2, state, ids = moto_stack
    orphan = ec2.run_instances(ImageId=ids["ami"], InstanceType=AMI_TYPE, MinCount=1, MaxCount=1,
                               SubnetId=ids["subnet"],
                               TagSpecifications=[{"ResourceType": "instance", "Tags": _stack_tags()}]
                               )["Instances"][0]["InstanceId"]
    ec2.authorize_security_group_ingress(GroupId=ids["sg"], IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
    resized = ids["instances"]["gpu-b0000-n00001"]
    ec2.stop_instances(InstanceIds=[resized])
    ec2.modify_instance_attribute(InstanceId=resized, InstanceType={"Value": "p5e.48xlarge"})
    ec2.start_instances(InstanceIds=[resized])

    findings = _scan_findings(ec2, state)
    assert sorted((f.check, f.subject, f.field, f.expected, f.found) for f in findings) == sorted([
        (dc.ORPHAN, orphan, "instance", "not in the cloud", f"{AMI_TYPE} running"),
        (dc.SG_ADDED, f"{ids['sg']} ({STACK}-efa)", "ingress", None, "ingress tcp port 22 from 0.0.0.0/0"),
        (dc.LT_MISMATCH, f"{resized} (gpu-b0000-n00001)", "instanceType", AMI_TYPE, "p5e.48xlarge"),
    ])
    assert "tag, subnet" in next(f.message for f in findings if f.check == dc.ORPHAN)


def _cli_project(tmp_path: Path) -> Project:
    return make_project(tmp_path / "proj")


@pytest.mark.parametrize("drifted", [False, True])
def test_the_drift_command_exits_0_on_a_clean_moto_stack_and_4_with_drift(tmp_path, moto_stack, monkeypatch, drifted):
    ec2, state, ids = moto_stack
    if drifted:
        ec2.authorize_security_group_ingress(GroupId=ids["sg"], IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 6817, "ToPort": 6818, "IpRanges": [{"CidrIp": "10.9.0.0/16"}]}])
    project = _cli_project(tmp_path)
    fake = FakePulumi(previews=[("preview-clean.jsonl", 0, "")], refreshes=[("refresh-clean.jsonl", 0, "")],
                      state=state)
    sources = real_sources(load_stack("dev"), project, STACK, pulumi_command=fake, ec2=ec2)
    monkeypatch.setattr("gpufleet.reports.stack_sources.stack_sources", lambda *a: sources)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["--project", str(project.root), "drift", "-s", "dev", "--layer", "cloud", "--json",
                                  "--out", str(out)])
    assert r.exit_code == (4 if drifted else 0), r.output
    doc = json.loads(r.stdout)
    cloud = doc["layers"][0]
    assert [x["status"] for x in doc["layers"]] == ["drift" if drifted else "clean", "skipped", "skipped"]
    assert [(f["check"], f["found"]) for f in cloud["findings"]] == (
        [(dc.SG_ADDED, "ingress tcp ports 6817-6818 from 10.9.0.0/16")] if drifted else [])
    assert sorted(p.name for p in out.iterdir()) == ["drift-junit.xml", "drift.html", "drift.json", "drift.md"]


def test_the_drift_command_exits_1_when_a_layer_cannot_run(tmp_path, monkeypatch):
    project = _cli_project(tmp_path)
    fake = FakePulumi(previews=[("preview-program-error.jsonl", 255, "error: update failed\n")],
                      refreshes=[("refresh-drift.jsonl", 0, "")])
    sources = real_sources(load_stack("dev"), project, STACK, pulumi_command=fake, ec2=_NoEc2())
    monkeypatch.setattr("gpufleet.reports.stack_sources.stack_sources", lambda *a: sources)
    r = CliRunner().invoke(main, ["--project", str(project.root), "drift", "-s", "dev", "--layer", "cloud"])
    assert r.exit_code == 1, r.output
    assert "layer(s) could not run: cloud (code-vs-state: pulumi preview" in r.output
    assert "finding(s) in the others" in r.output  # the refresh's drift is still reported
    md = (project.reports_dir("dev") / "drift.md").read_text()
    assert "Could not run" in md and "incomplete" in md


def test_the_audit_exits_1_when_the_fleet_cannot_be_read(tmp_path, monkeypatch):
    project = _cli_project(tmp_path)
    fake = FakePulumi()

    def export_fails(args, *rest, **kw):
        if args[:2] == ["stack", "export"]:
            raise create_command_error(CommandResult(stdout="", stderr="error: no stack named 'gpu' found\n", code=255))
        return FakePulumi.run(fake, args, *rest, **kw)
    monkeypatch.setattr(fake, "run", export_fails)
    sources = real_sources(load_stack("dev"), project, STACK, pulumi_command=fake, ec2=_NoEc2())
    monkeypatch.setattr("gpufleet.reports.stack_sources.stack_sources", lambda *a: sources)
    r = CliRunner().invoke(main, ["--project", str(project.root), "audit", "-s", "dev"])
    assert r.exit_code == 1, r.output
    assert "pulumi stack export failed" in r.output and "no stack named 'gpu'" in r.output
    assert not (project.reports_dir("dev") / "audit.json").exists()  # no report of a fleet never seen
