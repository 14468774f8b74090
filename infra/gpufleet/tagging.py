"""Tag keys shared by every component, the policy pack and the simulator.

It sits below both `infra/gpufleet/cloud/` (which writes the tags) and `policies/` (which checks them),
so neither folder imports the other: the offline preview imports the policies, never the reverse.

The provider's `default_tags` carry the stack-wide tags; resources repeat them in their own
`tags` because policies and mocks only see a resource's own inputs.
"""

from __future__ import annotations

from typing import Protocol

STACK = "gpufleet.io/stack"
CLUSTER = "gpufleet.io/cluster"
BATCH = "gpufleet.io/batch"
BLOCK = "gpufleet.io/block"
SLOT = "gpufleet.io/slot"
ROLE = "gpufleet.io/role"
MANAGED_BY = "managed-by"
MANAGED_BY_VALUE = "gpufleet"
REQUIRED = (STACK, CLUSTER, MANAGED_BY)
NODE_REQUIRED = REQUIRED + (BATCH, BLOCK, SLOT)


class SlotIdentity(Protocol):
    """What a node's tags name: a plan slot (`NodeSlot`) or a staged one (`StagedSlot`)."""

    @property
    def name(self) -> str: ...
    @property
    def batch(self) -> int: ...
    @property
    def block(self) -> int: ...


def base_tags(stack: str, cluster: str) -> dict[str, str]:
    return {STACK: stack, CLUSTER: cluster, MANAGED_BY: MANAGED_BY_VALUE}


def with_role(tags: dict[str, str], role: str, name: str | None = None) -> dict[str, str]:
    out = {**tags, ROLE: role}
    if name:
        out["Name"] = name
    return out


def node_tags(tags: dict[str, str], slot: SlotIdentity) -> dict[str, str]:
    return {**tags, ROLE: "gpu-node", "Name": slot.name, SLOT: slot.name, BATCH: str(slot.batch),
            BLOCK: str(slot.block)}
