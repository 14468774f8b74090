"""The storage base check's clients: which instance types they may be, and whether they can prove the plan.

Why dedicated clients: the storage base check must halt a shortfall before any GPU node is bought
(DESIGN.md section 6), so on a real stack fio runs from small non-GPU instances the Pulumi program
creates with the network and the file system (`gpufleet.cloud.storage_clients`). Their network
bandwidth, not the GPU type's, caps what fio can draw, so the check judges the file system at
what they can reach; when that is less than the file system is sized for, the check proves only
part of it, and the plan says so up front. Pure.
"""

from __future__ import annotations

import math

from gpufleet.catalog import CLIENT_TYPE_GBPS
from gpufleet.findings import Finding, warning
from gpufleet.plan.model import StoragePlan

DEFAULT_CLIENT_TYPE = "c6in.8xlarge"


def client_type_mbs(client_type: str) -> int:
    """One storage client's network bandwidth in MB/s (Lustre over TCP on its ENA)."""
    return CLIENT_TYPE_GBPS[client_type] * 1000 // 8


def storage_client_findings(storage: StoragePlan, clients: int, client_type: str) -> list[Finding]:
    """A WARNING when the clients together cannot draw what the file system is sized for.

    The check's floor is `storageMinShare` x min(file system, clients x client bandwidth), so
    slow clients never fail it for the file system; but then it proves only what they reach, and
    the plan says so, with a client type (or count of the largest) that would prove it all."""
    reach = clients * client_type_mbs(client_type)
    sized = storage.aggregate_throughput_mbs
    if reach >= sized:
        return []
    faster = next((t for t in CLIENT_TYPE_GBPS if clients * client_type_mbs(t) >= sized), None)
    if faster is not None:
        hint = f"; {clients} x {faster} would"
    else:
        largest = max(CLIENT_TYPE_GBPS, key=CLIENT_TYPE_GBPS.__getitem__)
        hint = f"; {math.ceil(sized / client_type_mbs(largest))} x {largest} would"
    return [warning("STORAGE_CLIENTS_TOO_SLOW", "gpufleet:acceptance.storageClientType",
                    f"{clients} x {client_type} draw at most {reach} MB/s of the {sized} MB/s the file system is "
                    f"sized for: the storage base check proves only that much of it{hint}")]
