"""The boto3 scan where moto cannot go (placement groups, capacity reservations and blocks): the same
Ec2Scanner against botocore's Stubber, which checks every request's parameters and answers with
AWS's documented response shapes; and the client the production path builds.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from gpufleet.errors import ExternalCommandFailed
from gpufleet.reports import drift_cloud as dc
from gpufleet.reports.drift import LayerStatus
from gpufleet.reports.drift_run import DriftOptions, cloud_layer, reserved_capacity_ids
from gpufleet.reports.sources import Ec2Scanner, ec2_client
from gpufleet.spec import load_stack

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
STACK = "inference"
PG = "inference-compute-pg"
LIVE = {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}


def _client():
    return boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                        config=Config(retries={"max_attempts": 1}))


def _state() -> dict:
    return {"deployment": {"resources": [
        {"type": dc.PLACEMENT_GROUP_TYPE, "id": PG, "urn": f"urn:pulumi:{STACK}::gpufleet::{dc.PLACEMENT_GROUP_TYPE}::pg",
         "outputs": {"name": PG, "strategy": "cluster"}},
        {"type": dc.INSTANCE_TYPE, "id": "i-0aaa0000000000001", "urn": "urn:x::inference-b0000-n00000",
         "outputs": {"tags": {"gpufleet.io/slot": "inference-b0000-n00000"},
                     "launchTemplate": {"id": "lt-0f00", "name": "lt", "version": "3"}}},
    ]}}


def _instance(iid: str, tags: dict[str, str]) -> dict:
    return {"InstanceId": iid, "InstanceType": "p5en.48xlarge", "ImageId": "ami-0a1b2c3d4e5f60001",
            "State": {"Code": 16, "Name": "running"}, "Placement": {"AvailabilityZone": "us-east-1a", "GroupName": PG},
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def _reservation(rid: str, state: str, end: datetime, kind: str = "capacity-block") -> dict:
    return {"CapacityReservationId": rid, "InstanceType": "p5en.48xlarge", "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": "us-east-1a", "TotalInstanceCount": 64, "AvailableInstanceCount": 0,
            "State": state, "EndDate": end, "ReservationType": kind, "Tenancy": "default"}


def test_placement_group_members_and_capacity_about_to_end_are_found(monkeypatch):
    ec2 = _client()
    stub = Stubber(ec2)
    managed = _instance("i-0aaa0000000000001", {"gpufleet.io/stack": STACK, "gpufleet.io/slot": "inference-b0000-n00000"})
    hand_made = _instance("i-0bbb0000000000002", {"Name": "debug-box"})  # in the placement group, no stack tag
    stub.add_response("describe_instances", {"Reservations": [{"ReservationId": "r-1", "Instances": [managed]}]},
                      {"Filters": [{"Name": "tag:gpufleet.io/stack", "Values": [STACK]}, LIVE]})
    stub.add_response("describe_instances", {"Reservations": [{"ReservationId": "r-1", "Instances": [managed]},
                                                              {"ReservationId": "r-2", "Instances": [hand_made]}]},
                      {"Filters": [{"Name": "placement-group-name", "Values": [PG]}, LIVE]})
    stub.add_response("describe_launch_template_versions", {"LaunchTemplateVersions": [
        {"LaunchTemplateId": "lt-0f00", "VersionNumber": 3, "DefaultVersion": True,
         "LaunchTemplateData": {"InstanceType": "p5en.48xlarge", "ImageId": "ami-0a1b2c3d4e5f60001"}}]},
        {"LaunchTemplateId": "lt-0f00", "Versions": ["3"]})
    ids = ["cr-0aaa", "cr-0bbb", "cr-0ccc"]
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        _reservation("cr-0aaa", "active", NOW + timedelta(hours=10)),
        _reservation("cr-0bbb", "active", NOW + timedelta(days=30), kind="default")], "NextToken": "page-2"},
        {"CapacityReservationIds": ids})
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        _reservation("cr-0ccc", "expired", NOW - timedelta(days=1))]},
        {"CapacityReservationIds": ids, "NextToken": "page-2"})
    view = dc.state_view(_state())
    with stub:
        scan = Ec2Scanner(ec2, STACK).scan(view, ids)
        stub.assert_no_pending_responses()
    findings = dc.unmanaged_findings(view, scan, NOW, timedelta(hours=72))
    assert sorted((f.check, f.subject, f.field, f.found) for f in findings) == [
        (dc.CAPACITY, "cr-0aaa", "endDate", (NOW + timedelta(hours=10)).isoformat()),
        (dc.CAPACITY, "cr-0ccc", "state", "expired"),
        (dc.ORPHAN, "i-0bbb0000000000002", "instance", "p5en.48xlarge running"),
    ]
    by = {f.subject: f for f in findings}
    assert "placement group" in by["i-0bbb0000000000002"].message
    assert "ends in 10.0 h" in by["cr-0aaa"].message and "30 minutes before" in by["cr-0aaa"].message
    assert all(f.severity.value == "critical" for f in findings if f.check == dc.CAPACITY)


def test_the_warning_window_is_configurable():
    scan = dc.CloudScan(instances={}, rules={}, templates={}, reservations=(
        dc.Reservation("cr-1", "active", "default", "p5.48xlarge", 8, NOW + timedelta(hours=100)),))
    assert dc.capacity_findings(scan, NOW, timedelta(hours=72)) == []
    [f] = dc.capacity_findings(scan, NOW, timedelta(hours=120))
    assert f.subject == "cr-1" and "capacity reservation" in f.message and "30 minutes" not in f.message


def test_an_api_refusal_is_a_cloud_layer_that_could_not_run():
    ec2 = _client()
    stub = Stubber(ec2)
    stub.add_client_error("describe_instances", service_error_code="UnauthorizedOperation",
                          service_message="You are not authorized to perform this operation.", http_status_code=403)
    with stub, pytest.raises(ExternalCommandFailed, match="AWS ec2 describe_instances failed: UnauthorizedOperation"):
        Ec2Scanner(ec2, STACK).scan(dc.state_view({}), ())
    quiet = SimpleNamespace(preview=list, refresh=list, export=dict)
    stub = Stubber(ec2)
    stub.add_client_error("describe_instances", service_error_code="RequestLimitExceeded", http_status_code=503)
    with stub:
        result = cloud_layer(load_stack(STACK), SimpleNamespace(pulumi=quiet, scanner=Ec2Scanner(ec2, STACK)), NOW,
                             DriftOptions())
    assert result.status is LayerStatus.ERROR and result.checks == [dc.CODE_VS_STATE, dc.CLOUD_VS_STATE]
    assert "RequestLimitExceeded" in result.errors[0]


def test_the_stacks_reserved_capacity_and_the_production_client():
    assert reserved_capacity_ids(load_stack(STACK)) == ("cr-0123456789abcdef0", "cr-0123456789abcdef1",
                                                        "cr-0123456789abcdef2")  # 64 instances a block
    assert reserved_capacity_ids(load_stack("dev")) == ()
    client = ec2_client("us-east-1")
    assert client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 11}  # botocore: 10 retries
    assert client.meta.region_name == "us-east-1"


def test_a_template_alias_is_asked_on_its_own_and_a_deleted_template_is_a_finding():
    ec2 = _client()
    stub = Stubber(ec2)
    state = {"deployment": {"resources": [
        {"type": dc.INSTANCE_TYPE, "id": "i-0aaa", "urn": "urn:x::a", "outputs": {
            "tags": {"gpufleet.io/slot": "a"}, "launchTemplate": {"id": "lt-1", "version": "$Latest"}}},
        {"type": dc.INSTANCE_TYPE, "id": "i-0bbb", "urn": "urn:x::b", "outputs": {
            "tags": {"gpufleet.io/slot": "b"}, "launchTemplate": {"id": "lt-2", "version": "4"}}},
    ]}}
    resized = {**_instance("i-0aaa", {"gpufleet.io/stack": STACK}), "InstanceType": "p5.48xlarge"}
    stub.add_response("describe_instances", {"Reservations": [{"ReservationId": "r-1", "Instances": [
        resized, _instance("i-0bbb", {"gpufleet.io/stack": STACK})]}]},
        {"Filters": [{"Name": "tag:gpufleet.io/stack", "Values": [STACK]}, LIVE]})
    stub.add_response("describe_launch_template_versions", {"LaunchTemplateVersions": [
        {"LaunchTemplateId": "lt-1", "VersionNumber": 7, "DefaultVersion": False,
         "LaunchTemplateData": {"InstanceType": "p5en.48xlarge", "ImageId": "ami-0a1b2c3d4e5f60001"}}]},
        {"LaunchTemplateId": "lt-1", "Versions": ["$Latest"]})
    stub.add_client_error("describe_launch_template_versions", service_error_code="InvalidLaunchTemplateId.NotFound",
                          service_message="The specified launch template, with template ID lt-2, does not exist.",
                          expected_params={"LaunchTemplateId": "lt-2", "Versions": ["4"]})
    view = dc.state_view(state)
    with stub:
        scan = Ec2Scanner(ec2, STACK).scan(view, ())
        stub.assert_no_pending_responses()
    found = dc.unmanaged_findings(view, scan, NOW, timedelta(hours=72))
    assert sorted((f.subject, f.field, f.expected, f.found) for f in found) == [
        ("i-0aaa (a)", "instanceType", "p5en.48xlarge", "p5.48xlarge"),
        ("i-0bbb (b)", "launchTemplate", "lt-2 version 4", None)]


def test_a_reservation_ec2_does_not_know_is_a_critical_finding_and_the_others_still_count():
    ec2 = _client()
    stub = Stubber(ec2)
    stub.add_response("describe_instances", {"Reservations": []},
                      {"Filters": [{"Name": "tag:gpufleet.io/stack", "Values": [STACK]}, LIVE]})
    gone = dict(service_error_code="InvalidCapacityReservationId.NotFound",
                service_message="The capacity reservation ID 'cr-0gone' does not exist")
    stub.add_client_error("describe_capacity_reservations", expected_params={"CapacityReservationIds": ["cr-0ok", "cr-0gone"]},
                          **gone)
    stub.add_response("describe_capacity_reservations",
                      {"CapacityReservations": [_reservation("cr-0ok", "active", NOW + timedelta(hours=5))]},
                      {"CapacityReservationIds": ["cr-0ok"]})
    stub.add_client_error("describe_capacity_reservations", expected_params={"CapacityReservationIds": ["cr-0gone"]},
                          **gone)
    view = dc.state_view({})
    with stub:
        scan = Ec2Scanner(ec2, STACK).scan(view, ["cr-0ok", "cr-0gone"])
        stub.assert_no_pending_responses()
    found = dc.unmanaged_findings(view, scan, NOW, timedelta(hours=72))
    assert sorted((f.subject, f.field, f.found) for f in found) == [
        ("cr-0gone", "state", "not-found"), ("cr-0ok", "endDate", (NOW + timedelta(hours=5)).isoformat())]
    assert "does not know" in next(f.message for f in found if f.subject == "cr-0gone")
