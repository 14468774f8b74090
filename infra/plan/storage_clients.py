"""The storage base check's clients: which instance types they may be, and whether they can prove the plan.

Why dedicated clients: the storage base check must halt a shortfall before any GPU node is bought
(DESIGN.md section 6), so on a real stack fio runs from small non-GPU instances the Pulumi program
creates with the network and the file system (`infra.cloud.storage_clients`). Their network
bandwidth, not the GPU type's, caps what fio can draw: when `storageClients` of them cannot reach
`storageMinShare` of what the check expects, the check would fail for the clients, not the file
system, and the plan says so up front. Pure.
"""

from __future__ import annotations

import math

from infra.catalog import InstanceType
from infra.findings import Finding, warning
from infra.plan.model import StoragePlan

# Network-optimised x86 (c6in), "Network specifications", Amazon EC2 Instance Types guide:
# https://docs.aws.amazon.com/ec2/latest/instancetypes/co.html#co_network (Gbps, baseline = peak here)
CLIENT_TYPE_GBPS: dict[str, int] = {
    "c6in.8xlarge": 50,
    "c6in.12xlarge": 75,
    "c6in.16xlarge": 100,
    "c6in.24xlarge": 150,
    "c6in.32xlarge": 200,
}
DEFAULT_CLIENT_TYPE = "c6in.8xlarge"


def client_type_mbs(client_type: str) -> int:
    """One storage client's network bandwidth in MB/s (Lustre over TCP on its ENA)."""
    return CLIENT_TYPE_GBPS[client_type] * 1000 // 8


def storage_client_findings(storage: StoragePlan, instance: InstanceType, clients: int, client_type: str,
                            min_share: float) -> list[Finding]:
    """A WARNING when the clients together cannot reach the storage check's throughput floor."""
    from infra.gates.acceptance import expected_storage_mbs  # the check's own floor, not a copy of it

    modelled = expected_storage_mbs(storage, instance, clients)
    floor = modelled * min_share
    reach = clients * client_type_mbs(client_type)
    if reach >= floor:
        return []
    faster = next((t for t in CLIENT_TYPE_GBPS if clients * client_type_mbs(t) >= floor), None)
    if faster is not None:
        hint = f"; {faster} would reach it"
    else:
        largest = max(CLIENT_TYPE_GBPS, key=CLIENT_TYPE_GBPS.__getitem__)
        needed = math.ceil(floor / client_type_mbs(largest))
        hint = f"; no client type does with {clients} clients: {needed} x {largest} would"
    return [warning("STORAGE_CLIENTS_TOO_SLOW", "gpufleet:acceptance.storageClientType",
                    f"{clients} x {client_type} reach {reach} MB/s, under the storage base check's floor of "
                    f"{floor:.0f} MB/s ({min_share:g} x {modelled} MB/s modelled): the check would fail for its "
                    f"clients, not the file system{hint}")]
