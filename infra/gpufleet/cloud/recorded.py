"""What this stack recorded at its last deployment, read from its own outputs.

The slot set must be a plain value at program time (resources created inside an apply are
invisible to previews), so the StackReference is awaited synchronously, the way the SDK's own
plain invokes do. The decisions over it are `staging`'s (pure).
"""

from __future__ import annotations

from typing import Sequence

import pulumi

from gpufleet.cloud.staging import (DEPLOYED_OUTPUT, LEGACY_IMAGES_OUTPUT, SLOTS_OUTPUT, Deployment,
                                 decode_deployment, legacy_deployment)
from gpufleet.errors import ConfigError
from gpufleet.plan.model import NodeSlot


def own_stack_name() -> str:
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"


def recorded_deployment(stack_name: str, cluster: str, plan_slots: Sequence[NodeSlot]) -> Deployment | None:
    """`deployedSlots`, else a legacy `deployedBatches` (+ `batchImages`), else None (a fresh stack)."""
    from pulumi.runtime.sync_await import _sync_await

    ref = pulumi.StackReference(stack_name)

    def read(name: str):
        details = _sync_await(ref.get_output_details(name))
        return details.value if details.value is not None else details.secret_value

    slots = read(SLOTS_OUTPUT)
    if slots is not None:
        return decode_deployment(slots)
    batches = read(DEPLOYED_OUTPUT)
    if batches is None:
        return None
    try:
        count = max(0, int(batches))
    except (TypeError, ValueError):
        raise ConfigError(f"stack output {DEPLOYED_OUTPUT} is {batches!r}", field=DEPLOYED_OUTPUT,
                          expected="an integer batch count") from None
    images = read(LEGACY_IMAGES_OUTPUT)
    images = {str(k): str(v) for k, v in images.items()} if isinstance(images, dict) else {}
    return legacy_deployment(cluster, count, plan_slots, images)
