"""The typed stack config: one pydantic model, two loaders.

A stack file `stacks/Pulumi.<stack>.yaml` holds one structured key per concern under the
`gpufleet:` namespace (`gpufleet:cluster`, `gpufleet:network`, ...). The CLI reads that
YAML itself (the Automation API ignores stackConfigDir); the Pulumi program reads the same
keys through `pulumi.Config`. Both end in `ClusterSpec.from_raw`, so they cannot disagree.

Schema errors name the file, the dotted field path as written in the stack file
(`gpufleet:cluster.targetGpus`) and what was expected; they raise `ConfigErrors` (exit 2).
Cross-field meaning (does the unit fit, is the subnet big enough) is not checked here but
by the plan's validators, which return findings.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import typing
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gpufleet import catalog, strict_yaml
from gpufleet.errors import ConfigError, ConfigErrors
from gpufleet.project import current_project

NAMESPACE = "gpufleet"


class _Model(BaseModel):
    # allow_inf_nan=False: YAML reads `.inf` and `.nan` as floats, which pass a one-sided bound
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel,
                              populate_by_name=True, use_enum_values=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: Any) -> Any:
        """YAML reads `yes`/`true` as booleans and pydantic would take them as 1: a boolean in a
        number's field is wrapped so that the field's own validation refuses it, at its location."""
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            key = field.alias if field.alias in data else name
            value = data.get(key)
            if not _numeric(field.annotation):
                continue
            if isinstance(value, bool):
                data = {**data, key: YamlBoolean(value)}
            elif isinstance(value, dict) and any(isinstance(v, bool) for v in value.values()):
                data = {**data, key: {k: YamlBoolean(v) if isinstance(v, bool) else v for k, v in value.items()}}
        return data


class YamlBoolean:
    """A boolean written where a number belongs (`dcgmLevel: yes`): no number validator accepts it."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{self.value!r} (a YAML boolean: yes/no/true/false/on/off)"


def _numeric(annotation: Any) -> bool:
    """Whether a field takes numbers (or a mapping to numbers) and no boolean."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is dict:
        return _numeric(args[1])
    if args and origin is not Annotated:
        return any(_numeric(a) for a in args) and bool not in args
    if origin is Annotated:
        return _numeric(args[0])
    return annotation in (int, float)


# --- cluster -------------------------------------------------------------------------------

class CapacityType(str, Enum):
    ON_DEMAND = "on-demand"
    CAPACITY_RESERVATION = "capacity-reservation"
    CAPACITY_BLOCK = "capacity-block"


class Capacity(_Model):
    """Where the instances come from. gpufleet targets capacity; it never purchases it."""

    type: CapacityType = CapacityType.ON_DEMAND
    reservation_ids: tuple[str, ...] = ()
    capacity_block_ids: tuple[str, ...] = ()

    @field_validator("reservation_ids", "capacity_block_ids")
    @classmethod
    def _ids(cls, ids: tuple[str, ...]) -> tuple[str, ...]:
        for i in ids:
            if not re.fullmatch(r"cr-[0-9a-f]{8,17}", i):
                raise ValueError(f"{i!r} is not a capacity reservation id (cr- followed by 8-17 hex digits)")
        return ids

    @model_validator(mode="after")
    def _consistent(self) -> "Capacity":
        if self.type is CapacityType.CAPACITY_RESERVATION and not self.reservation_ids:
            raise ValueError("type capacity-reservation needs at least one id in reservationIds")
        if self.type is CapacityType.CAPACITY_BLOCK and not self.capacity_block_ids:
            raise ValueError("type capacity-block needs at least one id in capacityBlockIds")
        if self.type is CapacityType.ON_DEMAND and (self.reservation_ids or self.capacity_block_ids):
            raise ValueError("type on-demand takes no reservationIds or capacityBlockIds")
        return self


class ClusterConfig(_Model):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{1,38}[a-z0-9]$")
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
    availability_zone: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
    instance_type: str
    target_gpus: int = Field(gt=0, le=100_000)
    spare_fraction: float = Field(default=0.05, ge=0, le=0.5)
    unit_gpus: int = Field(default=8, gt=0, le=1024)
    capacity: Capacity = Capacity()

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if v not in catalog.CATALOG:
            raise ValueError(f"unknown instance type {v!r}; expected one of {', '.join(sorted(catalog.CATALOG))}")
        return v

    @model_validator(mode="after")
    def _az_in_region(self) -> "ClusterConfig":
        if not self.availability_zone.startswith(self.region):
            raise ValueError(f"availabilityZone {self.availability_zone!r} is not in region {self.region!r}")
        return self

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.CATALOG[self.instance_type]


# --- partitions ----------------------------------------------------------------------------

class PartitionMode(str, Enum):
    DATA_PARALLEL = "data-parallel"
    INDEPENDENT = "independent"
    INFERENCE_PREFILL = "inference-prefill"
    INFERENCE_DECODE = "inference-decode"
    INTERACTIVE = "interactive"


class Partition(_Model):
    """A share of the cluster with its scheduling mode; give `units` or `gpus`, not both."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    mode: PartitionMode
    units: int | None = Field(default=None, gt=0, le=100_000)
    gpus: int | None = Field(default=None, gt=0, le=100_000)
    priority: int = Field(default=0, ge=0, le=1_000_000)
    quota_units: int | None = Field(default=None, ge=0, le=100_000)

    @model_validator(mode="after")
    def _one_share(self) -> "Partition":
        if (self.units is None) == (self.gpus is None):
            raise ValueError("give exactly one of units or gpus")
        return self


# --- network -------------------------------------------------------------------------------

class PodNetworking(_Model):
    """How an EKS pool's pods get IPs. `vpc-cni` takes pod IPs from the compute subnet."""

    mode: Literal["vpc-cni", "vpc-cni-custom-networking", "none"] = "none"
    max_pods: int = Field(default=110, gt=0, le=737)
    warm_ip_target: int | None = Field(default=None, ge=0, le=737)  # no node holds more pods
    minimum_ip_target: int | None = Field(default=None, ge=0, le=737)
    warm_eni_target: int = Field(default=1, ge=0, le=32)


class NetworkConfig(_Model):
    vpc_cidr: str = "10.0.0.0/16"
    compute_subnet_cidr: str = "10.0.0.0/20"
    management_subnet_cidr: str = "10.0.16.0/24"
    ip_headroom_fraction: float = Field(default=0.2, ge=0, le=2)
    pod_networking: PodNetworking = PodNetworking()

    @field_validator("vpc_cidr", "compute_subnet_cidr", "management_subnet_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v, strict=True)
        except ValueError as exc:
            raise ValueError(f"{v!r} is not an IPv4 network in CIDR form like 10.0.0.0/20 ({exc})") from None
        if not 16 <= net.prefixlen <= 28:
            raise ValueError(f"{v!r}: AWS VPCs and subnets take prefixes /16 to /28")
        return v


# --- storage -------------------------------------------------------------------------------

class StorageConfig(_Model):
    dataset_tib: float = Field(default=10, ge=0, le=1_000_000)
    checkpoint_tib: float = Field(default=1, ge=0, le=1_000_000)
    checkpoints_retained: int = Field(default=3, ge=0, le=10_000)
    target_checkpoint_write_seconds: float = Field(default=600, gt=0)
    deployment_type: Literal["PERSISTENT_2"] = "PERSISTENT_2"
    storage_class: Literal["SSD", "INTELLIGENT_TIERING"] = "SSD"
    efa_enabled: bool = False
    throughput_per_tib: int = 250
    import_path: str | None = Field(default=None, pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
    export_path: str | None = Field(default=None, pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
    mount_path: str = Field(default="/fsx", pattern=r"^/[A-Za-z0-9._/-]*$")

    @field_validator("throughput_per_tib")
    @classmethod
    def _tier(cls, v: int) -> int:
        if v not in (125, 250, 500, 1000):
            raise ValueError(f"{v} is not a PERSISTENT_2 throughput tier; expected one of 125, 250, 500, 1000 MB/s/TiB")
        return v


# --- model (memory fit) --------------------------------------------------------------------

class ModelConfig(_Model):
    parameters_billions: float = Field(gt=0, le=100_000)
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = "bf16"
    optimizer: Literal["adam", "adamw", "sgd", "adafactor"] = "adamw"
    activation_gib_per_gpu: float = Field(default=8.0, ge=0)


# --- rollout -------------------------------------------------------------------------------

class LocalBackend(_Model):
    type: Literal["local"] = "local"


class S3Backend(_Model):
    """Journal and bundles in S3; the lock a DynamoDB conditional write (as Terraform's backend)."""

    type: Literal["s3"]
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    prefix: str = "gpufleet"
    lock_table: str = Field(pattern=r"^[A-Za-z0-9_.-]{3,255}$")
    region: str | None = None


class RolloutConfig(_Model):
    canary_fraction: float = Field(default=0.1, gt=0, le=1)
    batch_size: int = Field(default=25, gt=0, le=100_000)  # nodes; no cluster has more
    max_failure_rate: float = Field(default=0.1, ge=0, le=1)
    # the canary's own bar: its first instances' failure rate above this halts the rollout before
    # anything else is provisioned (None: the same as maxFailureRate)
    canary_max_failure_rate: float | None = Field(default=None, ge=0, le=1)
    failures_before_blacklist: int = Field(default=2, ge=1, le=100)
    pipelining: bool = True
    # after the canary: batches in flight at once, and of them multi-node tests at the same time
    # (None: the plan's budget, gpufleet.plan.window); a stack may lower either, never raise the
    # fabric's derived limit
    max_batches_in_flight: int | None = Field(default=None, ge=1, le=100_000)
    max_fabric_tests: int | None = Field(default=None, ge=1, le=100_000)
    target_batch: int | None = Field(default=None, ge=0, le=100_000)
    allow_shrink: bool = False
    replace_action: Literal["stop-and-report", "terminate"] = "stop-and-report"
    # slot -> the replacement generation its instance is tagged with (gpufleet.tagging.GENERATION);
    # set by the rollout before a replacement's targeted `up` (`config set --path
    # 'gpufleet:rollout.slotGenerations["<slot>"]' n`), never by hand; a slot not listed is 0
    slot_generations: dict[str, Annotated[int, Field(ge=0, le=100_000)]] = Field(default_factory=dict)
    # the layout of a cluster grown or shrunk by whole blocks (gpufleet.plan.resize.encode_layout):
    # set by the rollout before its first `up` on the resized layout, never by hand; without it the
    # program lays the stack out afresh from targetGpus
    layout: str | None = Field(default=None, max_length=200_000)
    state_backend: LocalBackend | S3Backend = Field(default=LocalBackend(), discriminator="type")

    @field_validator("layout")
    @classmethod
    def _layout_is_the_rollouts(cls, value: str | None) -> str | None:
        import json

        if value is None:
            return value
        try:
            doc = json.loads(value)
        except ValueError:
            raise ValueError("is not the JSON layout `gpufleet rollout` writes (remove it to lay the stack "
                             "out afresh)") from None
        if not isinstance(doc, dict) or doc.get("format") != 1 or not isinstance(doc.get("blocks"), list):
            raise ValueError("is not a format-1 layout with a `blocks` list (written by `gpufleet rollout`)")
        return value


# --- gates, pool, image --------------------------------------------------------------------

class GatesConfig(_Model):
    dcgm_level: int = Field(default=2, ge=1, le=4)
    intra_node_busbw_floor_gbs: float | None = Field(default=None, gt=0)
    multi_node_busbw_floor_gbs: float | None = Field(default=None, gt=0)
    cohort_outlier_fraction: float = Field(default=0.1, gt=0, lt=1)
    baseline_message_bytes: int = Field(default=16 * 2**30, ge=2**20, le=2**40)
    # `gpufleet drift`: a baseline more than this fraction below the median of its history regresses
    drift_regression_fraction: float = Field(default=0.05, gt=0, lt=1)


class AcceptanceConfig(_Model):
    """The acceptance stages' bars (storage and network base checks, training smoke, image pre-pull).

    Why here: the floors are stack decisions (a file system may be shared, a smoke model may be
    swapped), and the defaults are documented next to the checks in infra/gpufleet/gates/acceptance.py.
    """

    storage_clients: int = Field(default=4, ge=1, le=64)  # fio clients of the storage base check
    # a real stack's clients: non-GPU instances the Pulumi program creates with the file system
    # (gpufleet.cloud.storage_clients), one of gpufleet.catalog.CLIENT_TYPE_GBPS
    storage_client_type: str = "c6in.8xlarge"
    storage_min_share: float = Field(default=0.8, gt=0, le=1)  # of the plan's modelled throughput
    random_read_min_iops: float = Field(default=1000, gt=0)  # aggregate, 4 KiB random reads
    random_read_p99_max_ms: float = Field(default=20, gt=0)
    metadata_min_ops: float = Field(default=500, gt=0)  # aggregate create/stat/remove per second
    checkpoint_shards: int = Field(default=8, ge=1, le=1024)
    mgmt_tcp_min_share: float = Field(default=0.5, gt=0, le=1)  # of one ENA card's line rate
    mgmt_tcp_max_retransmits: int = Field(default=1000, ge=0)
    mgmt_rtt_max_ms: float = Field(default=0.5, gt=0)
    mgmt_loss_max_percent: float = Field(default=0, ge=0, le=100)
    efa_latency_max_us: float = Field(default=30, gt=0)  # fi_pingpong usec/xfer at small messages
    efa_bw_min_share: float = Field(default=0.7, gt=0, le=1)  # fi_rma_bw vs one EFA card's line rate
    efa_pairs_per_block: int = Field(default=2, ge=1, le=64)
    smoke_nodes: int = Field(default=2, ge=2, le=4)
    smoke_steps: int = Field(default=30, ge=5, le=10_000)
    smoke_loss_factor: float = Field(default=0.5, gt=0, lt=1)  # the last loss at most this times the first
    smoke_min_samples_per_second: float | None = Field(default=None, gt=0)  # None: the instance type's floor
    # A real stack's smoke job (the simulator runs none) runs images/workloads/train_smoke.py, which
    # site.yml's workloads role installs on every node (None: that role's /opt/gpufleet/workloads/
    # train_smoke.py). With a workloadImage it runs in that image (pyxis), with its `smokeImagePython`;
    # without one, with the node's `smokePython`, which must have torch (the AMI's python3 has none).
    smoke_python: str = Field(default="python3", pattern=r"^[A-Za-z0-9._/+-]+$")
    smoke_image_python: str = Field(default="python", pattern=r"^[A-Za-z0-9._/+-]+$")
    smoke_script: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9._/+-]+\.py$")
    workload_image: str | None = Field(default=None, pattern=r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?"
                                       r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+@sha256:[0-9a-f]{64}$")

    @field_validator("storage_client_type")
    @classmethod
    def _known_client_type(cls, v: str) -> str:
        if v not in catalog.CLIENT_TYPE_GBPS:
            raise ValueError(f"storageClientType {v!r} is not one of {', '.join(catalog.CLIENT_TYPE_GBPS)}")
        return v


OPEN_CIDR = "0.0.0.0/0"


def _public_cidr(v: str) -> str:
    """A source the public EKS endpoint can see: a public IPv4 network (a private address only ever
    reaches the private endpoint, from inside the VPC). 0.0.0.0/0 passes here; validate warns of it."""
    try:
        net = ipaddress.IPv4Network(v, strict=True)
    except ValueError as exc:
        raise ValueError(f"{v!r} is not an IPv4 network in CIDR form (an egress address as a.b.c.d/32) ({exc})") from None
    if v != OPEN_CIDR and not net.is_global:
        raise ValueError(f"{v!r} is not a public address range: the public endpoint sees the operator's or CI's "
                         "egress (NAT or VPN) address; inside the VPC the private endpoint is used")
    return v


class PoolConfig(_Model):
    type: Literal["kubernetes", "slurm", "sim"]
    kubernetes_version: str = Field(default="1.33", pattern=r"^1\.\d{2}$")
    # Kubernetes: the EKS endpoint is private (reached from inside the VPC) unless this names the
    # public egress CIDRs of the machines that run `pulumi up` and the rollout (the operator's, a
    # CI runner's); then it is also public, for those sources only. `gpufleet validate` says which.
    endpoint_public_access_cidrs: tuple[Annotated[str, AfterValidator(_public_cidr)], ...] = ()  # public IPv4 CIDRs that may reach the EKS API; empty: private only
    # Kubernetes: the partitions' Kueue ClusterQueues share one cohort and may borrow each
    # other's idle GPUs; a lender takes them back by preempting the borrower.
    kueue_cohort_borrowing: bool = False
    # Slurm: the version slurmctld runs (picks topology/block from 23.11, topology/tree before);
    # unset: the BOM's pin for the stack's OS. MaxTime per partition name in minutes; interactive
    # partitions default to `slurmInteractiveMaxMinutes`, the others to INFINITE.
    slurm_version: str | None = Field(default=None, pattern=r"^\d{2}\.\d{2}(\.\d+)?$")
    slurm_max_minutes: dict[str, int] = Field(default_factory=dict)
    slurm_interactive_max_minutes: int = Field(default=60, gt=0, le=10_080)
    # Slurm: the MPI plugin of the gates' multi-node runs (`srun --mpi=`): nccl-tests built with MPI
    # start through the PMIx the slurm role installs; a Slurm without it (Debian's, as the
    # rehearsal's local cluster runs) takes `none`
    srun_mpi: str = Field(default="pmix", pattern=r"^(none|pmi2|pmix(_v\d+)?|cray_shasta)$")
    # Preemption between the teams' priorities (`ops.tenants[].priority`) inside a partition: off
    # (a higher team waits like everyone), requeue (the preempted job goes back to the queue) or
    # cancel. Slurm: PreemptType=preempt/qos with this PreemptMode; Kubernetes: Kueue evicts and requeues.
    preemption: Literal["off", "requeue", "cancel"] = "off"

    @model_validator(mode="after")
    def _public_endpoint_is_eks(self) -> "PoolConfig":
        if self.endpoint_public_access_cidrs and self.type != "kubernetes":
            raise ValueError(f"endpointPublicAccessCidrs is for a kubernetes pool's EKS endpoint, not pool type {self.type!r}")
        if len(set(self.endpoint_public_access_cidrs)) != len(self.endpoint_public_access_cidrs):
            raise ValueError("endpointPublicAccessCidrs names a CIDR twice")
        return self

    @field_validator("slurm_max_minutes")
    @classmethod
    def _positive_minutes(cls, v: dict[str, int]) -> dict[str, int]:
        for name, minutes in v.items():
            if minutes <= 0:
                raise ValueError(f"MaxTime for partition {name!r} must be a positive number of minutes (got {minutes})")
        return v


AMI_PATTERN = r"^ami-[0-9a-f]{8,17}$"


class ImageConfig(_Model):
    """The image new instances boot. `slotAmis` (slot -> AMI id) moves single slots to another
    image: what a reimage upgrade sets group by group (`pulumi config set --path
    'gpufleet:image.slotAmis["<slot>"]' ami-...`); every slot not listed keeps the AMI it was
    deployed with."""

    os: Literal["al2023", "ubuntu-22.04", "ubuntu-24.04"] = "al2023"
    ami_id: str | None = Field(default=None, pattern=AMI_PATTERN)
    ami_ssm_parameter: str | None = Field(default=None, pattern=r"^/.+")
    bom: str = "images/bom.yaml"
    slot_amis: dict[str, Annotated[str, Field(pattern=AMI_PATTERN)]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> "ImageConfig":
        if self.ami_id and self.ami_ssm_parameter:
            raise ValueError("give amiId or amiSsmParameter, not both")
        return self


class UpgradeConfig(_Model):
    """Grey upgrades of a live pool (`gpufleet upgrade`): whole blocks per group, the canary group
    one block, each later group `groupGrowth` times the blocks of the one before, never more than
    `maxUnavailableUnits` units of a partition out of service at once (partitions not listed:
    `maxUnavailableFraction` of their units, raised to their largest block when that leaves a unit in
    service; a block holding all of a partition's units is upgraded in pieces; see gpufleet.daytwo.upgrade_plan)."""

    group_growth: float = Field(default=2.0, ge=1.0)
    max_unavailable_units: dict[str, int] = Field(default_factory=dict)
    max_unavailable_fraction: float = Field(default=0.1, gt=0, le=1)
    drain_timeout_s: float = Field(default=3600.0, gt=0)  # running work past this holds the group: it halts
    # a pool that can evict (Kubernetes: the Eviction API, disruption budgets honoured) evicts the work still
    # running this long into a drain; None: half of drainTimeoutS; at or past drainTimeoutS: never evicts
    evict_after_s: float | None = Field(default=None, gt=0)

    @property
    def eviction_after_s(self) -> float:
        return self.evict_after_s if self.evict_after_s is not None else self.drain_timeout_s / 2
    # auto: reimage the nodes whose AMI is not the stack's pinned image.amiId, site.yml in place on the
    # rest; inplace: site.yml only (a new AMI reaches new instances only); reimage: as auto, but a
    # stack without a pinned image.amiId is refused instead of silently upgraded in place
    method: Literal["auto", "inplace", "reimage"] = "auto"

    @field_validator("max_unavailable_units")
    @classmethod
    def _positive(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: n for k, n in v.items() if n < 1}
        if bad:
            raise ValueError(f"every partition needs at least one unit it may take out of service, got {bad}")
        return v


class Tenant(_Model):
    """A team and the partitions it may submit to (`gpufleet ops access`)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")  # Slurm account, Kubernetes group gpufleet:<name>
    partitions: tuple[str, ...] = Field(min_length=1)
    members: tuple[str, ...] = ()  # Slurm users of the account (Kubernetes: the group's members, from IAM)
    # Kubernetes: the team's own Kueue quota in units per partition (its ClusterQueue's nominal quota;
    # what the teams leave of the partition's quota stays with the operators' queue). Unset: an even split.
    quota_units: dict[str, int] = Field(default_factory=dict)
    # With `pool.preemption`, in a partition it shares, this team's job preempts a running job of a
    # team with a lower priority when it cannot start otherwise (Slurm: QOS Priority and Preempt;
    # Kubernetes: the team's WorkloadPriorityClass). Equal priorities never preempt each other.
    priority: int = Field(default=0, ge=0, le=10_000)

    @field_validator("quota_units")
    @classmethod
    def _whole_units(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: n for k, n in v.items() if n < 0}
        if bad:
            raise ValueError(f"a team's quotaUnits per partition are whole units, 0 or more, got {bad}")
        return v

    @model_validator(mode="after")
    def _quota_in_own_partitions(self) -> "Tenant":
        stray = sorted(set(self.quota_units) - set(self.partitions))
        if stray:
            raise ValueError(f"quotaUnits names partitions the team does not submit to: {stray}")
        return self


class OpsConfig(_Model):
    """Monitoring thresholds (`gpufleet ops rules`) and how far alerts may act on their own (`ops serve`).

    Why here: the operating range and the alert budget are stack decisions; the hardware thresholds
    (Xid buckets, row remaps) come from the gates and are not repeated here.
    """

    util_min_percent: float = Field(default=70, ge=0, le=100)  # the seed's operating range on busy nodes
    util_max_percent: float = Field(default=90, ge=0, le=100)
    memory_max_fraction: float = Field(default=0.9, gt=0, le=1)
    error_window_minutes: int = Field(default=10, ge=1, le=1440)  # NVLink/EFA error counters' increase window
    nvlink_crc_errors_max: int = Field(default=100, ge=0)  # per GPU within the window
    efa_errors_max: int = Field(default=100, ge=0)  # per EFA device within the window
    slowdown_minutes: int = Field(default=10, ge=1, le=1440)  # a hardware slowdown held this long
    utilisation_minutes: int = Field(default=30, ge=1, le=1440)
    scrape_missing_minutes: int = Field(default=5, ge=1, le=1440)
    dcgm_exporter_port: int = Field(default=9400, ge=1, le=65535)
    node_exporter_port: int = Field(default=9100, ge=1, le=65535)
    # `ops serve`: alerts quarantine at most this share of a partition (quarantined or blacklisted by
    # anyone); beyond it they page, so a fleet-wide alert (a bad rule, an outage) never drains it
    max_quarantine_share: float = Field(default=0.1, gt=0, le=1)
    # the circuit breaker (gpufleet.daytwo.breaker): automatic take-outs stop once more than this share
    # of a partition (of the fleet) was wanted out within the window; reset by hand only
    breaker_partition_share: float = Field(default=0.2, gt=0, le=1)
    breaker_fleet_share: float = Field(default=0.1, gt=0, le=1)
    breaker_window_minutes: int = Field(default=60, ge=1, le=10080)
    # the remediation ladder per reason code or Xid ("xid-119"), overriding gpufleet.daytwo.remediation's
    # table: steps from reset-gpu, reboot, replace, quarantine, in order (checked by that module)
    remediation: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    page_command: tuple[str, ...] = ()  # argv run with the page as JSON on stdin; empty: log only
    tenants: tuple[Tenant, ...] = ()
    # Slurm: slurmdbd on the head node; the generated slurm.conf then enforces associations, limits
    # and QOS, which is what makes a partition's AllowAccounts (from `tenants`) mean anything
    slurm_accounting: bool = False
    slurmdbd_port: int = Field(default=6819, ge=1, le=65535)
    # Kubernetes: `stack` installs the pinned kube-prometheus-stack chart; `existing` leaves
    # Prometheus to the user and creates ServiceMonitors and a PrometheusRule for theirs
    prometheus: Literal["stack", "existing"] = "stack"
    prometheus_rule_labels: dict[str, str] = Field(default_factory=dict)  # the user's ruleSelector labels
    # where Alertmanager posts (`gpufleet ops serve`); a Slurm head node serves it on 127.0.0.1
    alert_webhook_url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+(/\S*)?$")

    @model_validator(mode="after")
    def _range(self) -> "OpsConfig":
        if self.util_min_percent >= self.util_max_percent:
            raise ValueError("utilMinPercent must be below utilMaxPercent")
        return self


# --- cost --------------------------------------------------------------------------------

class CostConfig(_Model):
    """How `gpufleet cost` prices GPU time and what it calls waste.

    Why a stack decision: the rate a team pays depends on how its capacity was bought, and an
    operator with a negotiated rate (a savings plan, a private price) must be able to say so
    instead of being shown a list price. `pricing` None follows `cluster.capacity.type`.
    """

    pricing: Literal["on-demand", "reservation", "capacity-block"] | None = None
    price_per_instance_hour: float | None = Field(default=None, gt=0)  # USD; replaces the catalog's price
    prometheus_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")  # DCGM metrics; None: not read
    low_util_percent: float = Field(default=30, ge=0, le=100)  # a job averaging below this held GPUs idle
    min_idle_minutes: float = Field(default=15, ge=0)  # idle stretches shorter than this are scheduling gaps


# --- configure -----------------------------------------------------------------------------

class ConfigureConfig(_Model):
    """How the rollout's Executor reaches a real stack's nodes (they have no public address).

    `ssm` (default): the amazon.aws.aws_ssm connection by instance id, no inbound port; it moves
    files through an S3 bucket, `ssmBucket`, by default the stack's own bucket (its `bucket`
    output; the plugin hands nodes presigned URLs made with the operator's credentials). `ssh`: to
    the private IPs, through a bastion (`sshProxyJump`, user@host) unless the controller sits inside
    the VPC; `sshUser` defaults to the AMI family's login (ec2-user on al2023, ubuntu else);
    `sshPrivateKeyFile` is a path, never a key.
    """

    connection: Literal["ssm", "ssh"] = "ssm"
    ssm_bucket: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    ssh_user: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    ssh_private_key_file: str | None = Field(default=None, pattern=r"^[^\s]+$")
    ssh_proxy_jump: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_-]{0,31}@[A-Za-z0-9.-]+(:\d{1,5})?$")

    @model_validator(mode="after")
    def _one_connection(self) -> "ConfigureConfig":
        ssh_keys = {"sshUser": self.ssh_user, "sshPrivateKeyFile": self.ssh_private_key_file,
                    "sshProxyJump": self.ssh_proxy_jump}
        if self.connection == "ssm" and any(v is not None for v in ssh_keys.values()):
            given = ", ".join(k for k, v in ssh_keys.items() if v is not None)
            raise ValueError(f"{given} only apply to connection ssh (this stack's connection is ssm)")
        if self.connection == "ssh" and self.ssm_bucket is not None:
            raise ValueError("ssmBucket only applies to connection ssm (this stack's connection is ssh)")
        return self


# --- simulator ----------------------------------------------------------------------------

SimFaultKind = Literal[
    "ecc-uncorrectable", "row-remap-failure", "row-remap-pending", "xid-79", "xid-48", "xid-64", "xid-74",
    "xid-119", "nvlink-down", "efa-missing", "slow-nvlink", "bad-nic", "version-skew", "unreachable",
    "configure-failed", "image-missing", "fabric-unhealthy", "fabric-degraded-bandwidth", "fabric-in-progress",
    "fabric-insufficient-resources", "output-unreadable", "xid-mig", "tool-missing", "nic-count-short", "plugin-beta",
    "latent",
]
SimSystemicFault = Literal["none", "nccl-socket-fallback", "driver-broken"]


class SimCapacityShortfall(_Model):
    """Provisioning of one batch comes back `count` instances short (InsufficientInstanceCapacity)
    on its first `failedAttempts` provision calls; later calls get the capacity."""

    batch: int = Field(ge=1)
    count: int = Field(ge=1)
    failed_attempts: int = Field(default=1, ge=1)


class SimBadReplacements(_Model):
    """`slots` of the faulty slots (permanent faults first) get a replacement with the same fault,
    for `generations` replacements in a row: what blacklisting a slot needs."""

    slots: int = Field(default=0, ge=0)
    generations: int = Field(default=1, ge=1)


class SimDurations(_Model):
    """Modelled stage durations (seconds). Nodes of one stage run in parallel."""

    # EC2 p5 launch to SSH/SSM ready: 32 network cards to attach, HGX + NVSwitch init; 5-10 min in practice
    boot: float = Field(default=480, ge=0)
    # `pulumi up` of one batch's instances on top of the boot (engine, API calls, waits)
    provision_api: float = Field(default=90, ge=0)
    # site.yml on a prebuilt AMI: facts, drivers/EFA verified, services, mounts (~10 min with a package install)
    configure: float = Field(default=600, ge=0)
    # pre-pull of the ~20 GB training image from ECR at ~100 MB/s per node
    image_pull: float = Field(default=200, ge=0)
    # dcgmi diag per level: r1 seconds, r2 2.5-10.5 min on 8 GPUs (AWS), r3 ~30 min, r4 ~1-2 h (DCGM docs)
    dcgm_level: dict[int, float] = Field(default_factory=lambda: {1: 60.0, 2: 450.0, 3: 1800.0, 4: 5400.0})
    # the rest of preflight: nvidia-smi, fi_info, lspci, versions, 1-16 GiB intra-node all_reduce sweep, EFA loopback
    preflight_other: float = Field(default=180, ge=0)
    # one multi-node all_reduce_perf run: launch, NCCL init over EFA, 20 iterations at 4 GiB (~30 s + ~40 s)
    nccl_run: float = Field(default=75, ge=0)
    # nvidia-smi -r on all GPUs (fabric manager restart included)
    reset: float = Field(default=60, ge=0)
    # a p5 reboot: firmware, HGX init, driver load (shorter than a first boot, no ENI attach)
    reboot: float = Field(default=360, ge=0)

    @field_validator("dcgm_level")
    @classmethod
    def _levels(cls, v: dict[int, float]) -> dict[int, float]:
        if set(v) != {1, 2, 3, 4} or any(s < 0 for s in v.values()):
            raise ValueError("give a non-negative duration for each DCGM level 1, 2, 3 and 4")
        return v


class SimAcceptanceFaults(_Model):
    """The acceptance stages' seeded faults (`gpufleet.sim.acceptance`): a file system that delivers
    `slowStorage` of its modelled throughput, slow lossy management links on the pairs touching
    `badMgmtNodes`, and the training rank on `divergingNode` ending with different parameters.
    The slots must be the plan's: the network stage samples pairs of the canary's nodes and the
    smoke job runs on its first admitted ones, so a fault elsewhere is never met."""

    slow_storage: float | None = Field(default=None, gt=0, lt=1)
    bad_mgmt_nodes: list[str] = Field(default_factory=list)
    diverging_node: str | None = None


class SimulatorConfig(_Model):
    """Present only on simulated stacks (`local`, `local-slurm`): the key, not the stack name,
    makes a stack simulated. The real Pulumi program refuses such a stack; the offline preview
    and the simulator run it under mocks. Owned by `gpufleet.sim` (fault mix, stage durations).

    `faults`: fault kind -> an integer count of nodes, or a share of the fleet's nodes below 1
    (rounded, at least one). Each faulty node has one fault; placement is seeded and spread over
    batches. `badLinks`: links between two otherwise healthy nodes that run slow. `systemic`: one
    fault on every node (a broken NCCL net plugin, an image whose driver does not load).
    `slurmJobSeconds`: on a local Slurm (`pool.type: slurm`), how long each job of the simulated
    job stream that a rollout submits holds its nodes (0: none submitted; `gpufleet.sim.jobs_slurm`).
    `jobStream`: on the simulated pool (`pool.type: sim`), day-two commands see the job stream's
    running jobs as busy nodes at the simulated clock's now (`gpufleet.sim.jobs_pool`): patrol
    yields to them. Off by default: tests that place work by hand keep the pool as they set it.
    """

    seed: int = Field(default=1, ge=0)
    slurm_job_seconds: int = Field(default=0, ge=0, le=3600)
    job_stream: bool = False
    faults: dict[SimFaultKind, float] = Field(default_factory=dict)
    bad_links: int = Field(default=0, ge=0)
    capacity_shortfall: SimCapacityShortfall | None = None
    systemic: SimSystemicFault = "none"
    bad_replacements: SimBadReplacements = SimBadReplacements()
    durations: SimDurations = SimDurations()
    acceptance: SimAcceptanceFaults = SimAcceptanceFaults()

    @field_validator("faults")
    @classmethod
    def _counts(cls, v: dict[str, float]) -> dict[str, float]:
        for kind, n in v.items():
            if n < 0 or (n >= 1 and not float(n).is_integer()):
                raise ValueError(f"{kind}: {n} is neither a whole count of nodes nor a share below 1")
        return v


# --- the whole spec ------------------------------------------------------------------------

class ClusterSpec(_Model):
    """Everything one stack declares. Field names are the `gpufleet:<key>` keys."""

    cluster: ClusterConfig
    partitions: tuple[Partition, ...] = ()
    network: NetworkConfig = NetworkConfig()
    storage: StorageConfig = StorageConfig()
    model: ModelConfig | None = None
    rollout: RolloutConfig = RolloutConfig()
    gates: GatesConfig = GatesConfig()
    acceptance: AcceptanceConfig = AcceptanceConfig()
    pool: PoolConfig
    image: ImageConfig = ImageConfig()
    simulator: SimulatorConfig | None = None
    ops: OpsConfig = OpsConfig()
    upgrade: UpgradeConfig = UpgradeConfig()
    configure: ConfigureConfig = ConfigureConfig()
    cost: CostConfig = CostConfig()

    @property
    def simulated(self) -> bool:
        return self.simulator is not None

    @field_validator("partitions")
    @classmethod
    def _unique_names(cls, parts: tuple[Partition, ...]) -> tuple[Partition, ...]:
        seen: set[str] = set()
        for p in parts:
            if p.name in seen:
                raise ValueError(f"partition name {p.name!r} appears twice")
            seen.add(p.name)
        return parts

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any], *, source: str) -> "ClusterSpec":
        """Validate the `gpufleet:` keys of one stack (already stripped of the namespace)."""
        try:
            return cls.model_validate(dict(raw))
        except ValidationError as exc:
            raise ConfigErrors([_to_config_error(e, source, strict_yaml.line_of(raw, e["loc"]))
                                for e in exc.errors()]) from None


def _to_config_error(err: Mapping[str, Any], source: str, line: int | None = None) -> ConfigError:
    loc = [str(p) for p in err["loc"]]
    # Pydantic appends the union member tag ('s3', 'local') to discriminated-union paths.
    field = f"{NAMESPACE}:{loc[0]}" if loc else f"{NAMESPACE}:"
    previous = loc[0] if loc else ""
    for part in loc[1:]:
        if previous in _TAGGED_UNIONS:  # pydantic inserts the union member's tag: not a key
            previous = ""
            continue
        field += f"[{part}]" if part.isdigit() else f".{part}"
        previous = part
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "string_pattern_mismatch":
        msg = "String does not have the expected form"
    expected = _expected(err)
    if "input" in err and err["type"] not in ("missing", "extra_forbidden") and not isinstance(err["input"], (dict, list)):
        msg += f" (got {err['input']!r})"
    return ConfigError(msg, path=source, field=field, expected=expected, line=line)


def _expected(err: Mapping[str, Any]) -> str | None:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return "this required field"
    if kind == "extra_forbidden":
        return "no such key here; check the spelling against the documented keys"
    if kind == "string_pattern_mismatch":
        return f"a string matching {ctx.get('pattern')}"
    return None


_TAGGED_UNIONS = {"stateBackend"}


# --- loaders -------------------------------------------------------------------------------

def _stacks_dir(stacks_dir: Path | None) -> Path:
    """An explicit folder (`--stacks-dir`), else the current project's stackConfigDir."""
    return Path(stacks_dir) if stacks_dir is not None else current_project().stacks_dir


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    return _stacks_dir(stacks_dir) / f"Pulumi.{stack}.yaml"


def raw_from_stack_yaml(path: Path) -> dict[str, Any]:
    """The `gpufleet:` keys of a Pulumi stack file, namespace stripped."""
    source = display_path(path)
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"a symbolic link that loops or leads nowhere (-> {os.readlink(path)})", path=source,
                          expected="a link that ends at a stack file")
    if not path.is_file():
        raise ConfigError("stack file not found", path=source,
                          expected=f"a file; stacks here: {', '.join(available_stacks(path.parent)) or 'none'}")
    try:
        doc = strict_yaml.load(path.read_text(encoding="utf-8"), source=source)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=source,
                          expected="a UTF-8 encoded YAML stack file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", path=source) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise ConfigError("no `config:` mapping", path=source, field="config",
                          expected="a Pulumi stack file with a top-level `config:` mapping")
    raw: dict[str, Any] = {}
    for key, value in doc["config"].items():
        if not isinstance(key, str) or not key.startswith(f"{NAMESPACE}:"):
            continue  # other providers' keys (aws:region ...) are Pulumi's business
        if isinstance(value, dict) and set(value) == {"secure"}:
            raise ConfigError("a Pulumi secret cannot carry gpufleet's structured config",
                              path=source, field=key, expected="a plain value; keep secrets in their own keys")
        raw[key.split(":", 1)[1]] = value
    _same_region(doc["config"], source)
    return _with_lines(raw, doc["config"])


def _with_lines(raw: dict[str, Any], config: Any) -> dict[str, Any]:
    """`raw` keyed without the namespace, still knowing each key's line (for located errors)."""
    lined = strict_yaml.LinedDict(raw)
    lines = getattr(config, "lines", {})
    lined.lines = {name: lines[f"{NAMESPACE}:{name}"] for name in raw if f"{NAMESPACE}:{name}" in lines}
    return lined


def _same_region(config: Mapping[str, Any], source: str) -> None:
    """Pulumi's AWS provider deploys to `aws:region`; gpufleet plans `cluster.region`: one region."""
    cluster = config.get(f"{NAMESPACE}:cluster")
    provider = config.get("aws:region")
    if not isinstance(cluster, dict) or not isinstance(provider, str) or "region" not in cluster:
        return
    if cluster["region"] != provider:
        line = strict_yaml.line_of(config, [f"{NAMESPACE}:cluster", "region"])
        raise ConfigError(f"cluster.region {cluster['region']!r} is not aws:region {provider!r}",
                          path=source, line=line, field=f"{NAMESPACE}:cluster.region",
                          expected="the same region in both: the AWS provider deploys to aws:region")


def load_stack(stack: str, stacks_dir: Path | None = None) -> ClusterSpec:
    """`stacks_dir/Pulumi.<stack>.yaml`; without a folder, the current project's stack file."""
    path = stack_file(stack, stacks_dir)
    return load_stack_path(path)


def load_stack_path(path: Path) -> ClusterSpec:
    return ClusterSpec.from_raw(raw_from_stack_yaml(path), source=display_path(path))


def load_from_pulumi_config(source: str = "pulumi config") -> ClusterSpec:
    """The Pulumi program's loader: the same keys, read through the engine's config."""
    import pulumi.runtime.config as runtime_config

    # The language host hands config over with set_all_config; older hosts use PULUMI_CONFIG.
    engine_config = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    raw: dict[str, Any] = {}
    for key, value in engine_config.items():
        if not key.startswith(f"{NAMESPACE}:"):
            continue
        name = key.split(":", 1)[1]
        if name.startswith("config:"):  # the engine's long form "gpufleet:config:cluster"
            name = name.split(":", 1)[1]
        raw[name] = _decode_config_value(value)
    return ClusterSpec.from_raw(raw, source=source)


def _decode_config_value(value: Any) -> Any:
    # The engine passes structured values as JSON strings, scalars as plain strings.
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def pulumi_config_from_raw(raw: Mapping[str, Any]) -> dict[str, str]:
    """The engine's view of a stack file's gpufleet keys (used by tests and the offline preview)."""
    return {f"{NAMESPACE}:{k}": json.dumps(v) for k, v in raw.items()}


def available_stacks(stacks_dir: Path | None = None) -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in _stacks_dir(stacks_dir).glob("Pulumi.*.yaml"))


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13)
        return display_path(Path(os.path.abspath(path)).parent) + "/" + path.name
    except ValueError:
        return str(path)
