"""`validate --cloud`: offerings and DescribeInstanceTypes from a real moto server; Service Quotas,
DescribeCapacityReservations (not implemented in moto) and FSx DescribeFileSystems through botocore's
Stubber, with response shapes the Stubber validates against the real API model."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import ANY, Stubber
from click.testing import CliRunner
from moto_server import moto_client, moto_endpoint  # noqa: F401  (fixtures)

from gpufleet import validate_cloud
from gpufleet.errors import ExternalCommandFailed
from gpufleet.findings import error
from gpufleet.plan import build_plan
from gpufleet.spec import load_stack
from gpufleet.validate_cloud import (FSX_PERSISTENT_2_CAPACITY_QUOTA_CODE, P_INSTANCE_VCPU_QUOTA_CODE, cloud_findings,
                                     modelled_rollout)

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
ACCOUNT = "123456789012"
CR_A, CR_B = "cr-0a1b2c3d4e5f60718", "cr-0f1e2d3c4b5a69788"  # the prod stack's reservations
BLOCKS = ["cr-0123456789abcdef0", "cr-0123456789abcdef1", "cr-0123456789abcdef2"]  # the inference stack's
# capacity blocks: at most 64 instances each, 129 need three


def blocks(**kw) -> list[dict]:
    """The inference stack's three blocks, 43 instances each (129 = nodes + spares)."""
    return [reservation(b, az="us-west-2c", count=43, itype="p5en.48xlarge", block=True, **kw) for b in BLOCKS]


# --- helpers ----------------------------------------------------------------------------------

def stack(name: str, **cluster_changes: Any):
    spec = load_stack(name)
    if cluster_changes:
        spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update=cluster_changes)})
    return spec, build_plan(spec)


def stubbed(service: str, region: str) -> tuple[Any, Stubber]:
    client = boto3.client(service, region_name=region, aws_access_key_id="testing",
                          aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1}))
    return client, Stubber(client)


class Ec2Split:
    """One ec2 client as cloud_findings sees it: capacity reservations from the Stubber,
    everything else from moto."""

    def __init__(self, moto_ec2: Any, stubbed_ec2: Any) -> None:
        self._moto, self._stubbed = moto_ec2, stubbed_ec2

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stubbed if name == "describe_capacity_reservations" else self._moto, name)


def quota_response(region: str, value: float) -> dict:
    return {"Quota": {
        "ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT}:ec2/{P_INSTANCE_VCPU_QUOTA_CODE}",
        "QuotaCode": P_INSTANCE_VCPU_QUOTA_CODE, "QuotaName": "Running On-Demand P instances",
        "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False,
        "UsageMetric": {"MetricNamespace": "AWS/Usage", "MetricName": "ResourceCount",
                        "MetricDimensions": {"Class": "P/OnDemand", "Resource": "vCPU", "Service": "EC2",
                                             "Type": "Resource"},
                        "MetricStatisticRecommendation": "Maximum"},
    }}


QUOTA_PARAMS = {"ServiceCode": "ec2", "QuotaCode": P_INSTANCE_VCPU_QUOTA_CODE}
FSX_QUOTA_PARAMS = {"ServiceCode": "fsx", "QuotaCode": FSX_PERSISTENT_2_CAPACITY_QUOTA_CODE}
ROOMY_FSX_GIB = 1_000_000.0  # the default answer of tests about something else: prod's 278,400 GiB fits


def fsx_quota_response(region: str, value: float) -> dict:
    """GetServiceQuota for Lustre Persistent_2 storage capacity (default 100,800 GiB in a new account)."""
    return {"Quota": {
        "ServiceCode": "fsx", "ServiceName": "Amazon FSx",
        "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT}:fsx/{FSX_PERSISTENT_2_CAPACITY_QUOTA_CODE}",
        "QuotaCode": FSX_PERSISTENT_2_CAPACITY_QUOTA_CODE, "QuotaName": "Lustre Persistent_2 storage capacity",
        "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False,
    }}


def lustre(fs_id: str, region: str, gib: int, *, deployment: str = "PERSISTENT_2", storage_type: str = "SSD",
           tags: dict[str, str] | None = None, lifecycle: str = "AVAILABLE") -> dict:
    """One DescribeFileSystems item as FSx returns it for a Lustre file system."""
    config: dict[str, Any] = {"WeeklyMaintenanceStartTime": "1:05:00", "DeploymentType": deployment,
                              "MountName": "abcdefgh", "DataCompressionType": "LZ4"}
    if deployment.startswith("PERSISTENT") and storage_type == "SSD":
        config["PerUnitStorageThroughput"] = 250
    item: dict[str, Any] = {
        "OwnerId": ACCOUNT, "CreationTime": NOW - timedelta(days=90), "FileSystemId": fs_id,
        "FileSystemType": "LUSTRE", "Lifecycle": lifecycle, "StorageType": storage_type,
        "VpcId": "vpc-0123456789abcdef0", "SubnetIds": ["subnet-0123456789abcdef0"],
        "NetworkInterfaceIds": ["eni-0123456789abcdef0"], "DNSName": f"{fs_id}.fsx.{region}.amazonaws.com",
        "ResourceARN": f"arn:aws:fsx:{region}:{ACCOUNT}:file-system/{fs_id}",
        "LustreConfiguration": config, "FileSystemTypeVersion": "2.15",
    }
    if storage_type != "INTELLIGENT_TIERING":
        item["StorageCapacity"] = gib
    if tags:  # FSx leaves Tags out of an untagged file system (the model's minimum length is 1)
        item["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
    return item


def reservation(rid: str, *, az: str, count: int, itype: str = "p5.48xlarge", state: str = "active",
                block: bool = False, start: datetime | None = None, end: datetime | None = None) -> dict:
    region = az[:-1]
    item = {
        "CapacityReservationId": rid, "OwnerId": ACCOUNT,
        "CapacityReservationArn": f"arn:aws:ec2:{region}:{ACCOUNT}:capacity-reservation/{rid}",
        "AvailabilityZoneId": "use2-az1", "InstanceType": itype, "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": az, "Tenancy": "default", "TotalInstanceCount": count,
        "AvailableInstanceCount": count, "EbsOptimized": True, "EphemeralStorage": False, "State": state,
        "StartDate": start or NOW - timedelta(days=30), "InstanceMatchCriteria": "targeted",
        "CreateDate": (start or NOW - timedelta(days=30)) - timedelta(days=1), "Tags": [],
        "ReservationType": "capacity-block" if block else "default",
    }
    if end is None:
        item["EndDateType"] = "unlimited"
    else:
        item.update(EndDate=end, EndDateType="limited")
    return item


class Cloud:
    """Clients for one stack: moto for offerings/types, Stubbers for quotas and reservations."""

    def __init__(self, moto_client, region: str) -> None:  # noqa: F811
        self.sq, self.sq_stub = stubbed("service-quotas", region)
        ec2_cr, self.cr_stub = stubbed("ec2", region)
        self.ec2 = Ec2Split(moto_client("ec2", region), ec2_cr)
        self.fsx, self.fsx_stub = stubbed("fsx", region)
        self.region = region
        self._fsx_answered = False

    def quota(self, value: float) -> "Cloud":
        self.sq_stub.add_response("get_service_quota", quota_response(self.region, value), QUOTA_PARAMS)
        return self

    def reservations(self, ids: list[str], items: list[dict]) -> "Cloud":
        self.cr_stub.add_response("describe_capacity_reservations", {"CapacityReservations": items},
                                  {"CapacityReservationIds": ids})
        return self

    def file_systems(self, quota_gib: float, *pages: list[dict]) -> "Cloud":
        """The FSx quota, then DescribeFileSystems page by page (NextToken between pages)."""
        self.sq_stub.add_response("get_service_quota", fsx_quota_response(self.region, quota_gib), FSX_QUOTA_PARAMS)
        for i, page in enumerate(pages or ([],)):
            answer: dict[str, Any] = {"FileSystems": page}
            if i + 1 < len(pages):
                answer["NextToken"] = f"page-{i + 1}"
            self.fsx_stub.add_response("describe_file_systems", answer, {"NextToken": f"page-{i}"} if i else {})
        self._fsx_answered = True
        return self

    def run(self, spec, plan, now: datetime = NOW):
        if not spec.simulated and not self._fsx_answered:
            self.file_systems(ROOMY_FSX_GIB)
        clients = {"ec2": self.ec2, "service-quotas": self.sq, "fsx": self.fsx}
        with self.sq_stub, self.cr_stub, self.fsx_stub:
            findings = cloud_findings(spec, plan, clients=clients, now=now)
            self.sq_stub.assert_no_pending_responses()
            self.cr_stub.assert_no_pending_responses()
            self.fsx_stub.assert_no_pending_responses()
        return findings


def codes(findings) -> list[tuple[str, str]]:
    return sorted((f.level.value, f.code) for f in findings)


@pytest.fixture()
def cloud(moto_client):  # noqa: F811
    return lambda region: Cloud(moto_client, region)


# --- quota (the local stack: on-demand, 125 p5 nodes + 5 spares) ------------------------------

def test_local_stack_needs_130_nodes_of_192_vcpus():
    spec, plan = stack("local")
    need = validate_cloud.need_of(spec, plan)
    assert (plan.topology.nodes, plan.topology.spare_nodes) == (125, 5)
    assert need.vcpus == 130 * 192 == 24_960


def test_quota_enough_gives_no_findings_at_all(cloud):
    spec, plan = stack("local")
    assert cloud("us-east-1").quota(24_960.0).run(spec, plan) == []


def test_quota_for_nodes_but_not_spares_is_an_error(cloud):
    spec, plan = stack("local")
    findings = cloud("us-east-1").quota(24_000.0).run(spec, plan)
    assert codes(findings) == [("ERROR", "QUOTA_P_VCPUS_SHORT")]
    assert "24,000" in findings[0].message and "24,960" in findings[0].message
    assert "L-417A185B" in findings[0].message and "at least 960" in findings[0].message


def test_quota_short_on_capacity_reservations_is_a_warning(cloud):
    spec, plan = stack("prod")
    items = [reservation(CR_A, az="us-east-2a", count=65), reservation(CR_B, az="us-east-2a", count=65)]
    findings = cloud("us-east-2").quota(24_000.0).reservations([CR_A, CR_B], items).run(spec, plan)
    assert codes(findings) == [("WARNING", "QUOTA_P_VCPUS_SHORT")]


def test_quota_falls_back_to_the_aws_default_when_none_is_applied(cloud):
    spec, plan = stack("local")
    c = cloud("us-east-1")
    c.sq_stub.add_client_error("get_service_quota", service_error_code="NoSuchResourceException",
                               service_message="The request failed because the specified quota does not exist.",
                               expected_params=QUOTA_PARAMS)
    c.sq_stub.add_response("get_aws_default_service_quota", quota_response("us-east-1", 0.0), QUOTA_PARAMS)
    findings = c.run(spec, plan)
    assert codes(findings) == [("ERROR", "QUOTA_P_VCPUS_SHORT")]


# --- capacity reservations (the prod stack: two reservations in us-east-2a) -------------------

def test_reservations_that_cover_nodes_and_spares_pass(cloud):
    spec, plan = stack("prod")
    items = [reservation(CR_A, az="us-east-2a", count=65), reservation(CR_B, az="us-east-2a", count=65)]
    assert cloud("us-east-2").quota(30_000.0).reservations([CR_A, CR_B], items).run(spec, plan) == []


def test_a_reservation_smaller_than_its_share_overflows(cloud):
    """aws-program-review B2: 100 + 30 covers 130 in sum, but the program launches 63 and 62 slots
    into the two (an even split), so the second overflows at its 31st; targeted launches have no
    on-demand fallback."""
    spec, plan = stack("prod")
    items = [reservation(CR_A, az="us-east-2a", count=100), reservation(CR_B, az="us-east-2a", count=30)]
    findings = cloud("us-east-2").quota(30_000.0).reservations([CR_A, CR_B], items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_SHARE_TOO_SMALL")]
    assert CR_B in findings[0].message and "30 available" in findings[0].message and "62 slots" in findings[0].message


def test_reservation_in_another_az_names_both_azs(cloud):
    spec, plan = stack("prod")
    items = [reservation(CR_A, az="us-east-2a", count=65), reservation(CR_B, az="us-east-2b", count=65)]
    findings = cloud("us-east-2").quota(30_000.0).reservations([CR_A, CR_B], items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_TOO_SMALL"), ("ERROR", "CAPACITY_WRONG_AZ")]
    wrong_az = next(f for f in findings if f.code == "CAPACITY_WRONG_AZ")
    assert CR_B in wrong_az.message and "us-east-2b" in wrong_az.message and "us-east-2a" in wrong_az.message
    assert wrong_az.field == "gpufleet:cluster.availabilityZone"


def test_reservations_too_small_for_nodes_and_spares(cloud):
    spec, plan = stack("prod")
    items = [reservation(CR_A, az="us-east-2a", count=64), reservation(CR_B, az="us-east-2a", count=64)]
    findings = cloud("us-east-2").quota(30_000.0).reservations([CR_A, CR_B], items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_TOO_SMALL")]
    assert "128 available" in findings[0].message and "needs 130" in findings[0].message


def test_reservation_of_another_instance_type(cloud):
    spec, plan = stack("prod")
    items = [reservation(CR_A, az="us-east-2a", count=130, itype="p4d.24xlarge"),
             reservation(CR_B, az="us-east-2a", count=10)]
    findings = cloud("us-east-2").quota(30_000.0).reservations([CR_A, CR_B], items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_TOO_SMALL"), ("ERROR", "CAPACITY_WRONG_INSTANCE_TYPE")]
    wrong = next(f for f in findings if f.code == "CAPACITY_WRONG_INSTANCE_TYPE")
    assert "p4d.24xlarge" in wrong.message and "p5.48xlarge" in wrong.message


def test_expired_reservation_does_not_count(cloud):
    spec, plan = stack("prod")
    items = [reservation(CR_A, az="us-east-2a", count=130, state="expired"),
             reservation(CR_B, az="us-east-2a", count=10)]
    findings = cloud("us-east-2").quota(30_000.0).reservations([CR_A, CR_B], items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_NOT_ACTIVE"), ("ERROR", "CAPACITY_TOO_SMALL")]


def test_unknown_reservation_id_is_a_finding_not_a_crash(cloud):
    spec, plan = stack("prod")
    c = cloud("us-east-2").quota(30_000.0)
    c.cr_stub.add_client_error("describe_capacity_reservations",
                               service_error_code="InvalidCapacityReservationId.NotFound",
                               service_message=f"The capacity reservation ID '{CR_B}' does not exist",
                               expected_params={"CapacityReservationIds": [CR_A, CR_B]})
    findings = c.run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_NOT_FOUND")]
    assert CR_B in findings[0].message


# --- capacity blocks (the inference stack: p5en in us-west-2c, 129 nodes, 6 batches) ----------

def test_modelled_rollout_is_batches_times_the_per_batch_table():
    spec, plan = stack("inference")
    assert (len(plan.batches), spec.gates.dcgm_level) == (6, 2)
    assert validate_cloud.need_of(spec, plan).rollout == modelled_rollout(6, 2) == timedelta(hours=7.5)


def test_capacity_block_long_enough_passes(cloud):
    spec, plan = stack("inference")
    # rollout 7.5 h from NOW, plus AWS's 30-minute termination lead: exactly 8 h is enough
    items = blocks(start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=8))
    assert cloud("us-west-2").quota(30_000.0).reservations(BLOCKS, items).run(spec, plan) == []


def test_quota_short_on_a_capacity_block_is_only_info(cloud):
    spec, plan = stack("inference")
    items = blocks(end=NOW + timedelta(days=7))
    findings = cloud("us-west-2").quota(0.0).reservations(BLOCKS, items).run(spec, plan)
    assert codes(findings) == [("INFO", "QUOTA_NOT_APPLICABLE")]


def test_capacity_block_ending_before_the_rollout_is_an_error(cloud):
    spec, plan = stack("inference")
    items = (blocks(start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=7, minutes=59))[:1]
             + blocks(start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=8))[1:])  # the first ends early
    findings = cloud("us-west-2").quota(30_000.0).reservations(BLOCKS, items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_BLOCK_TOO_SHORT")]
    assert "7.5 h" in findings[0].message and "2026-03-02 16:59 UTC" in findings[0].message


def test_scheduled_block_is_measured_from_its_start(cloud):
    spec, plan = stack("inference")
    start = NOW + timedelta(days=2)
    items = (blocks(state="scheduled", start=start, end=start + timedelta(hours=7))[:1]
             + blocks(start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=8))[1:])  # the first is scheduled
    findings = cloud("us-west-2").quota(30_000.0).reservations(BLOCKS, items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_BLOCK_TOO_SHORT"), ("INFO", "CAPACITY_SCHEDULED")]
    assert "2026-03-04 09:00 UTC" in next(f for f in findings if f.code == "CAPACITY_SCHEDULED").message


# --- offering (moto's offerings: p5en is not offered in us-east-1b) ---------------------------

def test_instance_type_not_offered_in_the_az(cloud):
    spec, plan = stack("dev", instance_type="p5en.48xlarge")
    assert spec.cluster.availability_zone == "us-east-1b"
    findings = cloud("us-east-1").quota(1_000.0).run(spec, plan)
    assert codes(findings) == [("ERROR", "INSTANCE_TYPE_NOT_OFFERED")]
    assert "p5en.48xlarge" in findings[0].message and "us-east-1b" in findings[0].message


def test_storage_clients_not_offered_in_the_az_are_an_error_naming_their_field(cloud):
    """moto offers no c6in size in us-east-1e; the clients launch before any GPU node, so say it here."""
    spec, plan = stack("dev", availability_zone="us-east-1e")
    findings = cloud("us-east-1").quota(1_000.0).run(spec, plan)
    client, = [f for f in findings if f.code == "STORAGE_CLIENT_TYPE_NOT_OFFERED"]
    assert client.level.value == "ERROR" and client.field == "gpufleet:acceptance.storageClientType"
    assert "c6in.8xlarge" in client.message and "us-east-1e" in client.message
    spec, plan = stack("dev")
    assert not [f for f in cloud("us-east-1").quota(1_000.0).run(spec, plan)
                if f.code == "STORAGE_CLIENT_TYPE_NOT_OFFERED"]


# --- FSx for Lustre storage-capacity quota (AWS review B8; prod plans 278,400 GiB) ----------

def test_prod_file_system_over_a_new_accounts_fsx_quota_is_an_error(cloud):
    spec, plan = stack("prod")
    assert plan.storage.capacity_gib == 278_400
    items = [reservation(CR_A, az="us-east-2a", count=65), reservation(CR_B, az="us-east-2a", count=65)]
    findings = cloud("us-east-2").quota(30_000.0).reservations([CR_A, CR_B], items).file_systems(100_800.0).run(spec, plan)
    short, = findings
    assert (short.level.value, short.code, short.field) == ("ERROR", "QUOTA_FSX_CAPACITY_SHORT", "gpufleet:storage")
    assert "fsx/L-8F1B9C74" in short.message and "100,800 GiB" in short.message
    assert "278,400 GiB" in short.message and "at least 177,600 GiB" in short.message


def test_fsx_capacity_used_by_other_file_systems_counts_across_pages(cloud):
    """Raised to 300,000 GiB, prod fits alone but not beside 2 x 14,400 GiB of other PERSISTENT_2
    file systems on two pages; Scratch, Persistent_1, Intelligent-Tiering, deleting ones and prod's own
    file system (its cluster and role tags) do not count."""
    spec, plan = stack("prod")
    region = "us-east-2"
    own = lustre("fs-0000000000000prod", region, 278_400,
                 tags={"gpufleet.io/cluster": "prod", "gpufleet.io/role": "lustre"})
    page1 = [lustre("fs-0a000000000000001", region, 14_400), own,
             lustre("fs-0a000000000000002", region, 50_000, deployment="SCRATCH_2"),
             lustre("fs-0a000000000000003", region, 50_000, deployment="PERSISTENT_1")]
    page2 = [lustre("fs-0a000000000000004", region, 14_400, tags={"gpufleet.io/cluster": "prod"}),
             lustre("fs-0a000000000000005", region, 0, storage_type="INTELLIGENT_TIERING"),
             lustre("fs-0a000000000000006", region, 90_000, lifecycle="DELETING")]
    items = [reservation(CR_A, az="us-east-2a", count=65), reservation(CR_B, az="us-east-2a", count=65)]
    c = cloud(region).quota(30_000.0).reservations([CR_A, CR_B], items).file_systems(300_000.0, page1, page2)
    short, = c.run(spec, plan)
    assert short.code == "QUOTA_FSX_CAPACITY_SHORT"
    assert "2 other PERSISTENT_2 file system(s) hold 28,800 GiB" in short.message
    assert "at least 7,200 GiB" in short.message
    c = cloud(region).quota(30_000.0).reservations([CR_A, CR_B], items).file_systems(307_200.0, page1, page2)
    assert c.run(spec, plan) == []


def test_fsx_quota_falls_back_to_the_aws_default(cloud):
    spec, plan = stack("dev")
    c = cloud("us-east-1").quota(1_000.0)
    c.sq_stub.add_client_error("get_service_quota", service_error_code="NoSuchResourceException",
                               service_message="The request failed because the specified quota does not exist.",
                               expected_params=FSX_QUOTA_PARAMS)
    c.sq_stub.add_response("get_aws_default_service_quota", fsx_quota_response("us-east-1", 1_000.0),
                           FSX_QUOTA_PARAMS)
    c.fsx_stub.add_response("describe_file_systems", {"FileSystems": []}, {})
    c._fsx_answered = True
    short, = c.run(spec, plan)
    assert short.code == "QUOTA_FSX_CAPACITY_SHORT" and "1,200 GiB" in short.message


def test_fsx_describe_denied_is_a_warning_naming_the_fsx_action(cloud):
    spec, plan = stack("dev")
    c = cloud("us-east-1").quota(1_000.0)
    c.sq_stub.add_response("get_service_quota", fsx_quota_response("us-east-1", 100_800.0), FSX_QUOTA_PARAMS)
    c.fsx_stub.add_client_error("describe_file_systems", service_error_code="AccessDeniedException",
                                service_message="not authorized to perform: fsx:DescribeFileSystems",
                                http_status_code=400, expected_params={})
    c._fsx_answered = True
    denied, = c.run(spec, plan)
    assert denied.code == "CLOUD_CHECK_DENIED" and denied.field == "gpufleet:storage"
    assert "fsx:DescribeFileSystems" in denied.message


# --- failures ---------------------------------------------------------------------------------

def test_access_denied_on_quotas_is_a_warning_and_the_rest_still_runs(cloud):
    spec, plan = stack("prod")
    c = cloud("us-east-2")
    c.sq_stub.add_client_error("get_service_quota", service_error_code="AccessDeniedException",
                               service_message="User: arn:aws:iam::123456789012:user/ci is not authorized to "
                                               "perform: servicequotas:GetServiceQuota",
                               http_status_code=400, expected_params=QUOTA_PARAMS)
    items = [reservation(CR_A, az="us-east-2a", count=60), reservation(CR_B, az="us-east-2a", count=60)]
    findings = c.reservations([CR_A, CR_B], items).run(spec, plan)
    assert codes(findings) == [("ERROR", "CAPACITY_TOO_SMALL"), ("WARNING", "CLOUD_CHECK_DENIED")]
    denied = next(f for f in findings if f.code == "CLOUD_CHECK_DENIED")
    assert "servicequotas:GetServiceQuota" in denied.message and "quota" in denied.message


def test_unauthorized_on_reservations_is_a_warning_naming_the_ec2_action(cloud):
    spec, plan = stack("prod")
    c = cloud("us-east-2").quota(10_000.0)
    c.cr_stub.add_client_error("describe_capacity_reservations", service_error_code="UnauthorizedOperation",
                               service_message="You are not authorized to perform this operation.",
                               http_status_code=403, expected_params={"CapacityReservationIds": [CR_A, CR_B]})
    findings = c.run(spec, plan)
    assert codes(findings) == [("WARNING", "CLOUD_CHECK_DENIED"), ("WARNING", "QUOTA_P_VCPUS_SHORT")]
    denied = next(f for f in findings if f.code == "CLOUD_CHECK_DENIED")
    assert "ec2:DescribeCapacityReservations" in denied.message and denied.field == "gpufleet:cluster.capacity"


def test_throttled_describe_is_an_external_failure(cloud):
    spec, plan = stack("prod")
    c = cloud("us-east-2").quota(30_000.0)
    c.cr_stub.add_client_error("describe_capacity_reservations", service_error_code="RequestLimitExceeded",
                               service_message="Request limit exceeded.", http_status_code=503,
                               expected_params={"CapacityReservationIds": ANY})
    with pytest.raises(ExternalCommandFailed) as caught:
        c.run(spec, plan)
    text = str(caught.value)
    assert "DescribeCapacityReservations" in text and "RequestLimitExceeded" in text
    assert "Request limit exceeded." in text and caught.value.exit_code == 1


def test_unreachable_endpoint_is_an_external_failure():
    spec, plan = stack("dev")
    config = Config(retries={"max_attempts": 1}, connect_timeout=2)
    dead = {name: boto3.client(name, region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                               aws_access_key_id="testing", aws_secret_access_key="testing", config=config)
            for name in ("ec2", "service-quotas")}
    with pytest.raises(ExternalCommandFailed) as caught:
        cloud_findings(spec, plan, clients=dead, now=NOW)
    assert "DescribeInstanceTypeOfferings" in str(caught.value)
    assert "EndpointConnectionError" in str(caught.value)


def test_default_clients_use_the_stack_region_and_three_retries():
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    clients = validate_cloud.make_clients("us-east-2", session)
    assert set(clients) == {"ec2", "service-quotas", "fsx"}
    for client in clients.values():
        assert client.meta.region_name == "us-east-2"
        assert client.meta.config.retries["total_max_attempts"] == 4  # max_attempts=3 counts retries


# --- the CLI ----------------------------------------------------------------------------------

def test_cli_validate_cloud_error_finding_exits_2(monkeypatch):
    from gpufleet.cli import main

    seen = {}

    def fake(spec, plan):
        seen["stack"] = spec.cluster.name
        return [error("CAPACITY_TOO_SMALL", "gpufleet:cluster.capacity", "usable capacity reservations have 1")]

    monkeypatch.setattr(validate_cloud, "cloud_findings", fake)
    result = CliRunner().invoke(main, ["validate", "-s", "prod", "--cloud"])
    assert result.exit_code == 2, result.output
    assert seen == {"stack": "prod"} and "CAPACITY_TOO_SMALL" in result.output


def test_cli_validate_cloud_api_failure_exits_1(monkeypatch):
    from gpufleet.cli import main

    def fake(spec, plan):
        raise ExternalCommandFailed("AWS ec2 DescribeCapacityReservations", "RequestLimitExceeded: slow down")

    monkeypatch.setattr(validate_cloud, "cloud_findings", fake)
    result = CliRunner().invoke(main, ["validate", "-s", "prod", "--cloud"])
    assert result.exit_code == 1
    assert "DescribeCapacityReservations" in result.output and "RequestLimitExceeded" in result.output
