"""Tag keys shared by every component, the policy pack and the simulator.

It sits below both `infra/gpufleet/cloud/` (which writes the tags) and `policies/` (which checks them),
so neither folder imports the other: the offline preview imports the policies, never the reverse.

The provider's `default_tags` carry the stack-wide tags; resources repeat them in their own
`tags` because policies and mocks only see a resource's own inputs.
"""

from __future__ import annotations

from typing import Mapping, Protocol

STACK = "gpufleet.io/stack"
CLUSTER = "gpufleet.io/cluster"
BATCH = "gpufleet.io/batch"
BLOCK = "gpufleet.io/block"
SLOT = "gpufleet.io/slot"
ROLE = "gpufleet.io/role"
# a GPU instance's replacement generation: 0 for a slot's first instance, n for its n-th replacement
# (a reimage keeps it). Why: the spares a rollout bought are then on the instances themselves, so a
# journal cut by hand cannot make a resumed rollout buy past its spare budget (rollout.reconcile).
GENERATION = "gpufleet.io/generation"
MANAGED_BY = "managed-by"
MANAGED_BY_VALUE = "gpufleet"
REQUIRED = (STACK, CLUSTER, MANAGED_BY)
# GENERATION is not required: an instance launched before the tag existed reads as generation 0
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


def node_tags(tags: dict[str, str], slot: SlotIdentity, generation: int = 0) -> dict[str, str]:
    return {**tags, ROLE: "gpu-node", "Name": slot.name, SLOT: slot.name, BATCH: str(slot.batch),
            BLOCK: str(slot.block), GENERATION: str(generation)}


def generation_of(tags: Mapping[str, str] | None) -> int:
    """The replacement generation an instance's tags name; 0 when absent or not a count (an
    instance launched before the tag existed, or a hand-edited tag: the journal's count then rules)."""
    value = str((tags or {}).get(GENERATION, "")).strip()
    return int(value) if value.isdigit() else 0
