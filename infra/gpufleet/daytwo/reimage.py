"""Reimage: an upgrade step that replaces a slot's instance with one booted from another image.

Why a port of its own next to the rollout's Provisioner: bringing slots to instances is every
provider's job, moving a live slot to another AMI is a capability (the Pulumi driver sets the
program's per-slot override `image.slotAmis` and runs a targeted `up`; the simulator launches
from its image catalogue). Both are idempotent by image: a slot already running the AMI is left
alone, which is what lets a resumed upgrade call them again without reimaging anything twice.

The decisions here are pure: which method an upgrade uses, and which slots it reimages.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from gpufleet.errors import ConfigError
from gpufleet.plan.model import NodeSlot
from gpufleet.ports import ProvisionResult
from gpufleet.spec import ClusterSpec

INPLACE, REIMAGE = "inplace", "reimage"


@runtime_checkable
class Reimager(Protocol):
    def images(self) -> Mapping[str, str | None]:
        """slot -> the AMI its running instance booted (None: not known)."""
        ...

    def reimage(self, slots: Sequence[NodeSlot], ami: str) -> ProvisionResult:
        """Move `slots` to new instances booted from `ami`; slots already on `ami` are kept as they are."""
        ...


def target_image(spec: ClusterSpec) -> str | None:
    """The AMI an upgrade brings nodes to: the stack's pinned `image.amiId` unless `upgrade.method`
    is inplace. An SSM parameter is resolved only at deploy time, so it cannot be compared with
    what nodes run: `method: reimage` refuses it, `auto` upgrades in place."""
    method = spec.upgrade.method
    if method == INPLACE:
        return None
    if spec.image.ami_id is None and method == REIMAGE:
        raise ConfigError("upgrade.method reimage needs the image to reimage from, pinned",
                          field="gpufleet:image.amiId",
                          expected="an AMI id (ami-...) built from the new BOM, or upgrade.method auto|inplace")
    return spec.image.ami_id


def reimager(provisioner: Any) -> Reimager:
    if not isinstance(provisioner, Reimager):
        raise ConfigError(f"the stack's provisioner ({type(provisioner).__name__}) cannot reimage a slot",
                          field="gpufleet:upgrade.method", expected="inplace for this stack")
    return provisioner


def stale_images(slots: Sequence[str], images: Mapping[str, str | None], ami: str) -> list[str]:
    """The slots not running `ami` (in the order given)."""
    return [s for s in slots if images.get(s) != ami]


def unknown_images(slots: Sequence[str], images: Mapping[str, str | None]) -> list[str]:
    """Slots whose image is not known: a failed group could not be reimaged back to it."""
    return [s for s in slots if not images.get(s)]
