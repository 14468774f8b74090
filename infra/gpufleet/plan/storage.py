"""FSx for Lustre sizing: capacity in valid increments, throughput tier, checkpoint time.

Increments (FSx for Lustre User Guide, "Managing storage capacity" and "Managing
provisioned throughput capacity"): PERSISTENT_2 SSD takes 1,200 GiB, 2,400 GiB, then
multiples of 2,400 GiB; EFA-enabled file systems take multiples of 38,400 / 19,200 / 9,600 /
4,800 GiB at 125 / 250 / 500 / 1000 MB/s/TiB; Intelligent-Tiering has elastic capacity and
a throughput capacity in multiples of 4,000 MB/s.
"""

from __future__ import annotations

import math

from gpufleet.catalog import InstanceType
from gpufleet.findings import Finding, info, warning
from gpufleet.plan.model import StoragePlan
from gpufleet.spec import StorageConfig

HEADROOM = 0.2
TIB = 2**40
MB = 10**6
EFA_INCREMENT_GIB = {125: 38_400, 250: 19_200, 500: 9_600, 1000: 4_800}
SSD_SMALL_SIZES_GIB = (1_200, 2_400)
SSD_INCREMENT_GIB = 2_400
INTELLIGENT_TIERING_STEP_MBS = 4_000


def capacity_gib(needed_gib: float, storage: StorageConfig) -> tuple[int, int]:
    """(capacity, increment) in GiB: the smallest valid size holding `needed_gib`."""
    if storage.efa_enabled:
        step = EFA_INCREMENT_GIB[storage.throughput_per_tib]
        return max(1, math.ceil(needed_gib / step)) * step, step
    for size in SSD_SMALL_SIZES_GIB:
        if needed_gib <= size:
            return size, SSD_INCREMENT_GIB
    return math.ceil(needed_gib / SSD_INCREMENT_GIB) * SSD_INCREMENT_GIB, SSD_INCREMENT_GIB


def client_mbs(instance: InstanceType, efa_enabled: bool) -> int:
    """One node's Lustre client bandwidth: all EFA cards with an EFA-enabled file system, else one ENA card."""
    gbps = instance.network_gbps if efa_enabled else instance.card_gbps
    return gbps * 1000 // 8


def plan_storage(storage: StorageConfig, instance: InstanceType, nodes: int) -> tuple[StoragePlan, list[Finding]]:
    findings: list[Finding] = []
    raw_tib = storage.dataset_tib + storage.checkpoint_tib * storage.checkpoints_retained
    needed_tib = raw_tib * (1 + HEADROOM)
    checkpoint_bytes = storage.checkpoint_tib * TIB
    clients = nodes * client_mbs(instance, storage.efa_enabled)
    if storage.storage_class == "INTELLIGENT_TIERING":
        wanted = checkpoint_bytes / MB / storage.target_checkpoint_write_seconds
        aggregate = max(1, math.ceil(wanted / INTELLIGENT_TIERING_STEP_MBS)) * INTELLIGENT_TIERING_STEP_MBS
        capacity, increment, tier = None, None, None
    else:
        capacity, increment = capacity_gib(needed_tib * 1024, storage)
        tier = storage.throughput_per_tib
        aggregate = int(capacity / 1024 * tier)
    effective = min(aggregate, clients)
    write_s = checkpoint_bytes / MB / effective if effective else math.inf
    if write_s > storage.target_checkpoint_write_seconds:
        findings.append(warning(
            "CHECKPOINT_WRITE_SLOW", "gpufleet:storage.targetCheckpointWriteSeconds",
            f"a {storage.checkpoint_tib} TiB checkpoint takes {write_s:.0f} s at {effective} MB/s "
            f"(file system {aggregate} MB/s, clients {clients} MB/s), over the {storage.target_checkpoint_write_seconds:.0f} s target"
            + (_faster_tier_hint(storage, needed_tib, checkpoint_bytes, clients) if tier else "")))
    if capacity is not None and capacity > needed_tib * 1024 * 2:
        findings.append(info("FSX_CAPACITY_ROUNDED", "gpufleet:storage",
                             f"{needed_tib:.1f} TiB needed; the smallest valid size is {capacity} GiB"))
    plan = StoragePlan(needed_tib=round(needed_tib, 3), capacity_gib=capacity, increment_gib=increment,
                       storage_class=storage.storage_class, efa_enabled=storage.efa_enabled,
                       throughput_per_tib=tier, aggregate_throughput_mbs=aggregate, client_throughput_mbs=clients,
                       effective_throughput_mbs=effective, checkpoint_write_seconds=round(write_s, 1),
                       target_checkpoint_write_seconds=storage.target_checkpoint_write_seconds)
    return plan, findings


def _faster_tier_hint(storage: StorageConfig, needed_tib: float, checkpoint_bytes: float, clients: int) -> str:
    for tier in (125, 250, 500, 1000):
        trial = storage.model_copy(update={"throughput_per_tib": tier})
        cap, _ = capacity_gib(needed_tib * 1024, trial)
        if checkpoint_bytes / MB / min(cap / 1024 * tier, clients) <= storage.target_checkpoint_write_seconds:
            return f"; throughputPerTib {tier} would meet it"
    return "; no throughput tier meets it at this capacity: raise capacity or lower the checkpoint size"
