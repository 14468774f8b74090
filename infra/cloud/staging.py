"""Which batches have instances: the stack's batch target against what it last deployed.

DESIGN section 6. `gpufleet:rollout.targetBatch` raises the count; a missing target means
"what the stack last deployed" (its own `deployedBatches` output, read through a
StackReference), so a plain `pulumi up` never shrinks the fleet and a fresh stack creates
no instances until the rollout raises the target. A target past the last batch means all
batches. A target below the recorded count is a ConfigError unless `rollout.allowShrink`.
Instances of batches below the recorded count are admitted or being gated: protected.
Instances that already exist ignore AMI, user-data and launch-template changes, so a new
image reaches new batches only.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from infra.errors import ConfigError

DEPLOYED_OUTPUT = "deployedBatches"
IMAGES_OUTPUT = "batchImages"  # {batch: AMI id} as deployed, so existing batches keep their image
FROZEN_PROPERTIES = ["ami", "user_data", "launch_template"]


@dataclass(frozen=True)
class Staging:
    active: int  # batches 1..active have instances
    recorded: int  # what the stack last deployed

    def has_instances(self, batch: int) -> bool:
        return batch <= self.active

    def protected(self, batch: int) -> bool:
        return batch < self.recorded and batch <= self.active

    def existing(self, batch: int) -> bool:
        return batch <= self.recorded


def resolve_staging(target: int | None, recorded: int, batches: int, allow_shrink: bool) -> Staging:
    active = recorded if target is None else target
    active = min(active, batches)
    if active < recorded and not allow_shrink:
        raise ConfigError(
            f"targetBatch {target if target is not None else 'unset'} would remove batches {active + 1}..{recorded}, "
            f"which this stack deployed (output {DEPLOYED_OUTPUT}={recorded})",
            field="gpufleet:rollout.targetBatch",
            expected=f"a target of at least {recorded}, or rollout.allowShrink: true (protected instances "
                     f"must then be unprotected with `pulumi state unprotect` first)")
    return Staging(active=active, recorded=recorded)


@dataclass(frozen=True)
class Recorded:
    batches: int
    images: dict[str, str]


def recorded_state(stack_name: str) -> Recorded:
    """The stack's own last `deployedBatches` and `batchImages` outputs (0 and {} for a fresh stack).

    The instance set must be a plain value at program time (resources created inside an
    apply are invisible to previews), so the reference is awaited synchronously, the way
    the SDK's own plain invokes do.
    """
    from pulumi.runtime.sync_await import _sync_await

    ref = pulumi.StackReference(stack_name)

    def read(name: str):
        details = _sync_await(ref.get_output_details(name))
        return details.value if details.value is not None else details.secret_value

    value, images = read(DEPLOYED_OUTPUT), read(IMAGES_OUTPUT)
    try:
        batches = max(0, int(value)) if value is not None else 0
    except (TypeError, ValueError):
        raise ConfigError(f"stack output {DEPLOYED_OUTPUT} is {value!r}", field=DEPLOYED_OUTPUT,
                          expected="an integer batch count") from None
    images = {str(k): str(v) for k, v in images.items()} if isinstance(images, dict) else {}
    return Recorded(batches=batches, images=images)


def own_stack_name() -> str:
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
