"""Live AWS checks for `gpufleet validate --cloud`: quotas, capacity, offering, catalog.

The offline plan says what the stack needs (nodes + spares of one instance type in one AZ);
these checks ask the account whether it can have it, before anything is created. Each check is
a thin boto3 call plus a pure decision helper (`*_findings`), so the decisions are testable
without AWS and the calls are testable against moto or botocore's Stubber.

Failure policy: a failed call is `ExternalCommandFailed` (exit 1) naming the API and AWS's error
code and message, because a validation that silently skipped a check would pass a stack it
never looked at. The one exception is a permission denial on one check: that becomes a WARNING
naming the missing IAM action and the remaining checks still run, since read-only validation
roles are often narrower than deploy roles.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping, Sequence

from gpufleet import catalog
from gpufleet.aws_rules import reservation_shares
from gpufleet.errors import ExternalCommandFailed
from gpufleet.findings import Finding, error, info, warning
from gpufleet import tagging as t
from gpufleet.spec import CapacityType, ClusterSpec

# Service Quotas: "Running On-Demand P instances", counted in vCPUs, per region.
QUOTA_SERVICE_CODE = "ec2"
P_INSTANCE_VCPU_QUOTA_CODE = "L-417A185B"

# Service Quotas: "Lustre Persistent_2 storage capacity", GiB, per region: the sum of StorageCapacity
# over the account's PERSISTENT_2 file systems (the only deployment type the spec allows; EFA-enabled
# ones are PERSISTENT_2 too). Default 100,800 GiB (the same ceiling SageMaker HyperPod exposes as
# FSxLustreConfig.SizeInGiB's maximum). Code and name as Service Quotas lists them for fsx (AWS review
# B8; seen in NVIDIA isvctl's FSx storage provider and in public quota listings: L-8F1B9C74; Persistent_1
# is L-C8640C82, Scratch L-AD2FC696).
FSX_QUOTA_SERVICE_CODE = "fsx"
FSX_PERSISTENT_2_CAPACITY_QUOTA_CODE = "L-8F1B9C74"
FSX_DEPLOYMENT_TYPE = "PERSISTENT_2"

# Modelled wall-clock hours per rollout batch, by the DCGM diagnostic level the gates run.
# A batch is: launch and boot (~20 min for p4/p5 with many network cards), configure (~15 min),
# the DCGM diag (r1/r2 take minutes, r3 ~30 min, r4 1.5-2 h) and the NCCL baseline (~15 min).
# Pipelining overlaps batches in practice; we ignore that on purpose so the estimate stays an
# upper bound: a capacity block judged long enough by it is long enough.
BATCH_HOURS_BY_DCGM_LEVEL: Mapping[int, float] = {1: 1.0, 2: 1.25, 3: 1.75, 4: 3.5}

# AWS begins terminating instances in a Capacity Block 30 minutes before it ends.
CAPACITY_BLOCK_TERMINATION_LEAD = timedelta(minutes=30)

ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
RESERVATION_NOT_FOUND_CODES = frozenset({"InvalidCapacityReservationId.NotFound",
                                         "InvalidCapacityReservationId.Malformed"})
LINUX_PLATFORM = "Linux/UNIX"

F_INSTANCE_TYPE = "gpufleet:cluster.instanceType"
F_AZ = "gpufleet:cluster.availabilityZone"
F_CAPACITY = "gpufleet:cluster.capacity"
F_STORAGE_CLIENT_TYPE = "gpufleet:acceptance.storageClientType"
F_STORAGE = "gpufleet:storage"


class _AccessDenied(Exception):
    """Internal: a check lacks an IAM permission; turned into a WARNING by `cloud_findings`."""

    def __init__(self, action: str, detail: str) -> None:
        self.action = action
        self.detail = detail
        super().__init__(f"{action}: {detail}")


@dataclass(frozen=True)
class Need:
    """What the plan asks of the account: nodes + spares of one type in one AZ."""

    instance_type: str
    availability_zone: str
    nodes: int
    vcpus: int
    rollout: timedelta
    slots: int = 0  # the instances the program launches (spares are not launched), split over the ids


def need_of(spec: ClusterSpec, plan: Any) -> Need:
    nodes = plan.topology.nodes + plan.topology.spare_nodes
    return Need(instance_type=spec.cluster.instance_type,
                availability_zone=spec.cluster.availability_zone,
                nodes=nodes,
                vcpus=nodes * spec.cluster.instance.vcpus,
                rollout=modelled_rollout(len(plan.batches), spec.gates.dcgm_level), slots=len(plan.nodes))


def modelled_rollout(batches: int, dcgm_level: int) -> timedelta:
    """Batches x hours per batch (BATCH_HOURS_BY_DCGM_LEVEL); an upper bound, see the table."""
    return timedelta(hours=batches * BATCH_HOURS_BY_DCGM_LEVEL[dcgm_level])


# --- pure decisions ---------------------------------------------------------------------------

def quota_findings(capacity_type: CapacityType, quota_vcpus: float, need: Need, region: str) -> list[Finding]:
    """Compare the P-instance On-Demand vCPU quota with what the plan will run.

    On-demand: a shortfall is an ERROR; launches past the quota fail with
    VcpuLimitExceeded halfway through a rollout.
    Capacity reservations: a WARNING. Instances in an On-Demand Capacity Reservation are
    On-Demand instances and the reserved capacity (used or not) already counts against this
    quota; AWS only lets a reservation be created within the quota, so a shortfall now means the
    quota was lowered or other P instances share it. Worth a look, not proof of failure.
    Capacity blocks: an INFO. Capacity Blocks are purchased capacity with their own limits
    (instances per block and across blocks); the On-Demand quota does not size them.
    The quota is regional and shared with every other running P instance; its current usage is
    not read here (that needs CloudWatch's AWS/Usage metrics), so "enough" means "quota >= need".
    """
    if quota_vcpus >= need.vcpus:
        return []
    text = (f"Service Quotas {QUOTA_SERVICE_CODE}/{P_INSTANCE_VCPU_QUOTA_CODE} (Running On-Demand P instances) "
            f"in {region} is {quota_vcpus:,.0f} vCPUs; {need.nodes} x {need.instance_type} (nodes + spares) "
            f"need {need.vcpus:,} vCPUs")
    if capacity_type is CapacityType.ON_DEMAND:
        return [error("QUOTA_P_VCPUS_SHORT", F_INSTANCE_TYPE,
                      f"{text}; request an increase of at least {need.vcpus - quota_vcpus:,.0f} vCPUs")]
    if capacity_type is CapacityType.CAPACITY_RESERVATION:
        return [warning("QUOTA_P_VCPUS_SHORT", F_INSTANCE_TYPE,
                        f"{text}; reserved capacity already counts against this quota, so launches into "
                        "the reservations should still succeed, but check who else uses the quota")]
    return [info("QUOTA_NOT_APPLICABLE", F_INSTANCE_TYPE,
                 f"{text}; capacity blocks are not sized by the On-Demand quota")]


def offering_findings(need: Need, offered_locations: Sequence[str]) -> list[Finding]:
    """ERROR when DescribeInstanceTypeOfferings does not list the type in the stack's AZ."""
    if need.availability_zone in offered_locations:
        return []
    return [error("INSTANCE_TYPE_NOT_OFFERED", F_AZ,
                  f"{need.instance_type} is not offered in {need.availability_zone} "
                  "(EC2 DescribeInstanceTypeOfferings); choose an AZ that offers it")]


def fsx_capacity_findings(planned_gib: int, quota_gib: float, file_systems: Sequence[Mapping[str, Any]],
                          cluster: str, region: str) -> list[Finding]:
    """ERROR when the planned file system does not fit beside the account's other PERSISTENT_2 ones.

    CreateFileSystem past the regional quota fails (ServiceLimitExceeded) during `up`, after the
    network and the bucket exist. Used capacity is the StorageCapacity of the region's other
    PERSISTENT_2 Lustre file systems (SSD; Intelligent-Tiering has elastic capacity and quotas of its
    own); this cluster's own file system (tags gpufleet.io/cluster = the cluster, gpufleet.io/role =
    lustre) is the planned one, so re-validating a deployed stack does not count it twice.
    """
    used, others = 0, 0
    for fs in file_systems:
        lustre = fs.get("LustreConfiguration") or {}
        if fs.get("FileSystemType") != "LUSTRE" or lustre.get("DeploymentType") != FSX_DEPLOYMENT_TYPE:
            continue
        if fs.get("StorageType") == "INTELLIGENT_TIERING" or fs.get("Lifecycle") == "DELETING":
            continue
        tags = {tag.get("Key"): tag.get("Value") for tag in fs.get("Tags") or []}
        if tags.get(t.CLUSTER) == cluster and tags.get(t.ROLE) == "lustre":
            continue
        used += int(fs.get("StorageCapacity") or 0)
        others += 1
    if planned_gib + used <= quota_gib:
        return []
    return [error("QUOTA_FSX_CAPACITY_SHORT", F_STORAGE,
                  f"Service Quotas {FSX_QUOTA_SERVICE_CODE}/{FSX_PERSISTENT_2_CAPACITY_QUOTA_CODE} (Lustre "
                  f"Persistent_2 storage capacity) in {region} is {quota_gib:,.0f} GiB; {others} other "
                  f"{FSX_DEPLOYMENT_TYPE} file system(s) hold {used:,} GiB and the plan's file system needs "
                  f"{planned_gib:,} GiB: request an increase of at least {planned_gib + used - quota_gib:,.0f} GiB "
                  "or shrink gpufleet:storage (datasetTib, checkpointTib, checkpointsRetained)")]


def _share_findings(r: Mapping[str, Any], kind: str, share: int) -> list[Finding]:
    """The program splits the slots evenly over the ids (aws_rules.reservation_for); a reservation
    smaller than its share overflows, and a targeted launch has no on-demand fallback."""
    available = int(r.get("AvailableInstanceCount") or 0)
    if available >= share:
        return []
    return [error("CAPACITY_SHARE_TOO_SMALL", F_CAPACITY,
                  f"{kind} {r.get('CapacityReservationId')} has {available} available instances, but the program "
                  f"launches {share} slots into it (an even split over the named ids); order the ids or "
                  "resize the reservations so each holds its share")]


def capacity_findings(capacity_type: CapacityType, requested_ids: Sequence[str],
                      reservations: Sequence[Mapping[str, Any]], need: Need, now: datetime) -> list[Finding]:
    """Do the targeted reservations or blocks hold nodes + spares, in the right AZ, for long enough?

    A reservation of the wrong type, AZ or platform, or in a state instances cannot launch into,
    is an ERROR and its instances do not count. The usable AvailableInstanceCount must reach
    nodes + spares, and each reservation must hold the share of slots the program launches into it. A capacity block must not end (less AWS's 30-minute termination lead) before
    the modelled rollout would finish, starting now or at the block's start, whichever is later.
    """
    block = capacity_type is CapacityType.CAPACITY_BLOCK
    kind = "capacity block" if block else "capacity reservation"
    findings: list[Finding] = []
    seen = {r.get("CapacityReservationId") for r in reservations}
    shares = reservation_shares(need.slots, tuple(requested_ids))
    overflow: list[Finding] = []  # reported when the sum is enough: CAPACITY_TOO_SMALL says the rest
    for missing in (i for i in requested_ids if i not in seen):
        findings.append(error("CAPACITY_NOT_FOUND", F_CAPACITY,
                              f"{kind} {missing} was not returned by EC2 DescribeCapacityReservations"))
    usable = 0
    for r in reservations:
        rid = r.get("CapacityReservationId", "?")
        problems: list[Finding] = []
        if r.get("InstanceType") != need.instance_type:
            problems.append(error("CAPACITY_WRONG_INSTANCE_TYPE", F_CAPACITY,
                                  f"{kind} {rid} reserves {r.get('InstanceType')}, the stack uses "
                                  f"{need.instance_type}"))
        if r.get("AvailabilityZone") != need.availability_zone:
            problems.append(error("CAPACITY_WRONG_AZ", F_AZ,
                                  f"{kind} {rid} is in {r.get('AvailabilityZone')}, the stack's "
                                  f"availabilityZone is {need.availability_zone}"))
        platform = r.get("InstancePlatform")
        if platform and platform != LINUX_PLATFORM:
            problems.append(error("CAPACITY_WRONG_PLATFORM", F_CAPACITY,
                                  f"{kind} {rid} is for {platform}; the nodes run {LINUX_PLATFORM}"))
        problems.extend(_state_findings(r, kind, block))
        findings.extend(problems)
        if not any(p.level.value == "ERROR" for p in problems):
            usable += int(r.get("AvailableInstanceCount") or 0)
            overflow.extend(_share_findings(r, kind, shares.get(rid, 0)))
        is_block = r.get("ReservationType") == "capacity-block"
        if is_block != block:
            findings.append(warning("CAPACITY_KIND_MISMATCH", F_CAPACITY,
                                    f"{rid} has ReservationType {r.get('ReservationType', 'default')!r} but the "
                                    f"stack declares capacity type {capacity_type.value}"))
        if is_block:
            findings.extend(_window_findings(r, need, now))
    if reservations and usable < need.nodes:
        findings.append(error("CAPACITY_TOO_SMALL", F_CAPACITY,
                              f"usable {kind}s have {usable} available instances; the plan needs "
                              f"{need.nodes} ({need.instance_type}, nodes + spares)"))
    else:
        findings.extend(overflow)
    return findings


def _state_findings(r: Mapping[str, Any], kind: str, block: bool) -> list[Finding]:
    rid, state = r.get("CapacityReservationId", "?"), r.get("State")
    if state == "active":
        return []
    if state == "scheduled":
        start = _fmt(r.get("StartDate"))
        text = f"{kind} {rid} is scheduled, not active yet: it starts {start}; the rollout cannot start before"
        return [info("CAPACITY_SCHEDULED", F_CAPACITY, text) if block
                else warning("CAPACITY_SCHEDULED", F_CAPACITY, text)]
    return [error("CAPACITY_NOT_ACTIVE", F_CAPACITY,
                  f"{kind} {rid} is {state!r}; instances can only launch into an active one")]


def _window_findings(r: Mapping[str, Any], need: Need, now: datetime) -> list[Finding]:
    rid, start, end = r.get("CapacityReservationId", "?"), r.get("StartDate"), r.get("EndDate")
    if end is None:
        return [warning("CAPACITY_BLOCK_NO_END", F_CAPACITY, f"capacity block {rid} reports no EndDate")]
    begin = max(now, start) if start is not None else now
    finish = begin + need.rollout
    last_usable = end - CAPACITY_BLOCK_TERMINATION_LEAD
    if finish <= last_usable:
        return []
    return [error("CAPACITY_BLOCK_TOO_SHORT", F_CAPACITY,
                  f"capacity block {rid} ends {_fmt(end)} (instances terminated from {_fmt(last_usable)}); "
                  f"the modelled rollout of {need.rollout.total_seconds() / 3600:g} h starting {_fmt(begin)} "
                  f"ends {_fmt(finish)}")]


def _fmt(t: datetime | None) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t else "at an unknown time"


# --- thin API calls ---------------------------------------------------------------------------

def _call(service: str, operation: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Call one boto3 operation; map its failure to ExternalCommandFailed or _AccessDenied."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kwargs)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code, message = err.get("Code", "Unknown"), err.get("Message", str(exc))
        if code in ACCESS_DENIED_CODES:
            raise _AccessDenied(f"{_iam_prefix(service)}:{operation}", f"{code}: {message}") from exc
        raise ExternalCommandFailed(f"AWS {service} {operation}", f"{code}: {message}") from exc
    except BotoCoreError as exc:  # EndpointConnectionError, NoCredentialsError, timeouts
        raise ExternalCommandFailed(f"AWS {service} {operation}", f"{type(exc).__name__}: {exc}") from exc


def _iam_prefix(service: str) -> str:
    return {"service-quotas": "servicequotas"}.get(service, service)


def _error_code(exc: BaseException) -> str | None:
    cause = exc.__cause__
    response = getattr(cause, "response", None) or {}
    return response.get("Error", {}).get("Code")


def check_quota(sq: Any, spec: ClusterSpec, need: Need) -> list[Finding]:
    """GetServiceQuota (the applied value); falls back to the AWS default when none is applied."""
    quota = _quota_value(sq, QUOTA_SERVICE_CODE, P_INSTANCE_VCPU_QUOTA_CODE)
    return quota_findings(spec.cluster.capacity.type, quota, need, spec.cluster.region)


def _quota_value(sq: Any, service_code: str, quota_code: str) -> float:
    """GetServiceQuota (the applied value); GetAWSDefaultServiceQuota when none is applied."""
    try:
        quota = _call("service-quotas", "GetServiceQuota", sq.get_service_quota,
                      ServiceCode=service_code, QuotaCode=quota_code)
    except ExternalCommandFailed as exc:
        if _error_code(exc) != "NoSuchResourceException":
            raise
        quota = _call("service-quotas", "GetAWSDefaultServiceQuota", sq.get_aws_default_service_quota,
                      ServiceCode=service_code, QuotaCode=quota_code)
    return float(quota["Quota"]["Value"])


def check_fsx_quota(sq: Any, fsx: Any, spec: ClusterSpec, plan: Any) -> list[Finding]:
    """The planned FSx capacity against the PERSISTENT_2 storage-capacity quota and what the region's
    file systems already use (DescribeFileSystems, every page)."""
    planned = plan.storage.capacity_gib
    if planned is None:  # Intelligent-Tiering: elastic, not sized by this quota
        return []
    quota = _quota_value(sq, FSX_QUOTA_SERVICE_CODE, FSX_PERSISTENT_2_CAPACITY_QUOTA_CODE)
    file_systems: list[Mapping[str, Any]] = []
    token: str | None = None
    while True:
        answer = _call("fsx", "DescribeFileSystems", fsx.describe_file_systems,
                       **({"NextToken": token} if token else {}))
        file_systems.extend(answer.get("FileSystems", []))
        token = answer.get("NextToken")
        if not token:
            break
    return fsx_capacity_findings(planned, quota, file_systems, spec.cluster.name, spec.cluster.region)


def check_capacity(ec2: Any, spec: ClusterSpec, need: Need, now: datetime) -> list[Finding]:
    """DescribeCapacityReservations for the targeted ids (blocks are capacity reservations too)."""
    capacity = spec.cluster.capacity
    if capacity.type is CapacityType.ON_DEMAND:
        return []
    ids = list(capacity.capacity_block_ids if capacity.type is CapacityType.CAPACITY_BLOCK
               else capacity.reservation_ids)
    try:
        answer = _call("ec2", "DescribeCapacityReservations", ec2.describe_capacity_reservations,
                       CapacityReservationIds=ids)
    except ExternalCommandFailed as exc:
        if _error_code(exc) not in RESERVATION_NOT_FOUND_CODES:
            raise
        return [error("CAPACITY_NOT_FOUND", F_CAPACITY,
                      f"EC2 does not know the targeted capacity in {spec.cluster.region}: {exc.detail}")]
    return capacity_findings(capacity.type, ids, answer.get("CapacityReservations", []), need, now)


def _offered_in(ec2: Any, instance_type: str, availability_zone: str) -> list[str]:
    answer = _call("ec2", "DescribeInstanceTypeOfferings", ec2.describe_instance_type_offerings,
                   LocationType="availability-zone",
                   Filters=[{"Name": "instance-type", "Values": [instance_type]},
                            {"Name": "location", "Values": [availability_zone]}])
    return [o["Location"] for o in answer.get("InstanceTypeOfferings", [])]


def check_offering(ec2: Any, need: Need) -> list[Finding]:
    return offering_findings(need, _offered_in(ec2, need.instance_type, need.availability_zone))


def check_storage_client_offering(ec2: Any, spec: ClusterSpec) -> list[Finding]:
    """The storage base check's clients (`gpufleet.cloud.storage_clients`) launch in the stack's AZ
    before any GPU node: a type not offered there fails the base's `up`, so say it here."""
    client_type, az = spec.acceptance.storage_client_type, spec.cluster.availability_zone
    if az in _offered_in(ec2, client_type, az):
        return []
    return [error("STORAGE_CLIENT_TYPE_NOT_OFFERED", F_STORAGE_CLIENT_TYPE,
                  f"{client_type} (the storage base check's clients) is not offered in {az} "
                  "(EC2 DescribeInstanceTypeOfferings); choose another c6in size")]


def check_catalog(ec2: Any, spec: ClusterSpec) -> list[Finding]:
    """catalog.cross_check against DescribeInstanceTypes; an unknown type is 'unverified'."""
    try:
        answer = _call("ec2", "DescribeInstanceTypes", ec2.describe_instance_types,
                       InstanceTypes=[spec.cluster.instance_type])
        items = answer.get("InstanceTypes", [])
    except ExternalCommandFailed as exc:
        if _error_code(exc) != "InvalidInstanceType":
            raise
        items = []
    return catalog.cross_check(spec.cluster.instance, items[0] if items else None, F_INSTANCE_TYPE)


CLIENTS = ("ec2", "service-quotas", "fsx")


def make_clients(region: str, session: Any = None) -> dict[str, Any]:
    """ec2, service-quotas and fsx clients in the stack's region.

    botocore's `max_attempts` counts retries, so 3 means up to 4 calls, with backoff, before a
    throttled or flaky call becomes ExternalCommandFailed.
    """
    import boto3
    from botocore.config import Config

    session = session or boto3.Session()
    config = Config(retries={"max_attempts": 3})
    return {name: session.client(name, region_name=region, config=config) for name in CLIENTS}


def cloud_findings(spec: ClusterSpec, plan: Any, *, session: Any = None,
                   clients: Mapping[str, Any] | None = None, now: datetime | None = None) -> list[Finding]:
    """Run every live check; a check without permission becomes a WARNING and the rest still run."""
    clients = clients or make_clients(spec.cluster.region, session)
    ec2, sq = clients["ec2"], clients["service-quotas"]
    now = now or datetime.now(timezone.utc)
    need = need_of(spec, plan)
    checks: list[tuple[str, str, Callable[[], list[Finding]]]] = [
        ("the instance type offering", F_AZ, lambda: check_offering(ec2, need)),
        ("the catalog cross-check", F_INSTANCE_TYPE, lambda: check_catalog(ec2, spec)),
        ("the P-instance vCPU quota", F_INSTANCE_TYPE, lambda: check_quota(sq, spec, need)),
        ("the capacity reservations", F_CAPACITY, lambda: check_capacity(ec2, spec, need, now)),
    ]
    if not spec.simulated:  # a simulated stack buys no storage clients and no file system
        checks.append(("the storage clients' offering", F_STORAGE_CLIENT_TYPE,
                       lambda: check_storage_client_offering(ec2, spec)))
        checks.append(("the FSx for Lustre storage-capacity quota", F_STORAGE,
                       lambda: check_fsx_quota(sq, clients["fsx"], spec, plan)))
    findings: list[Finding] = []
    for what, field, run in checks:
        try:
            findings.extend(run())
        except _AccessDenied as denied:
            findings.append(warning("CLOUD_CHECK_DENIED", field,
                                    f"{what} was not checked: missing permission {denied.action} "
                                    f"({denied.detail})"))
    return findings

