"""The simulated Provisioner: slots to instances, as `pulumi up` with a raised batch target would.

Semantics kept from the real adapter (gpufleet.ports.Provisioner): `provision(k, slots)`
makes batches 1..k exist (so a slot a previous call left short is retried too) and returns the
requested slots' instances; a slot that already has an instance is returned, never relaunched.
A configured capacity shortfall leaves the last slots of one batch without an instance for the
first calls (InsufficientInstanceCapacity), then capacity frees up. Every effect is in the ledger
before the call returns.

Images: a slot's first instance boots the AMI the real program gives it; a replacement boots the
image of the instance it replaces (as `pulumi up` after `state delete` does: the slot keeps its
recorded AMI); `reimage(slots, ami)` is what setting `image.slotAmis` and a targeted `up` do: the
old instance terminated, a new one launched from `ami` with that image's versions installed.

Tags: every instance carries its replacement generation (gpufleet.tagging.GENERATION, in the
ledger's `tag_generation` and the inventory's `Instance.generation`) as the real program writes it:
0 for a slot's first instance, one more per replacement, kept by a reimage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from gpufleet.errors import ProvisioningError
from gpufleet.plan.model import NodeSlot
from gpufleet.ports import Instance, ProvisionResult, ReplaceAction
from gpufleet.sim.world import SimInstance

if TYPE_CHECKING:
    from gpufleet.sim.fleet import SimFleet

ICE = ("InsufficientInstanceCapacity: We currently do not have sufficient {t} capacity in the Availability Zone "
       "you requested ({az}). Our system will be working on provisioning additional capacity.")


def port_instance(i: SimInstance) -> Instance:
    return Instance(slot=i.slot, instance_id=i.instance_id, batch=i.batch, block=i.block, private_ip=i.private_ip,
                    generation=i.tag_generation)


class SimProvisioner:
    def __init__(self, cloud: "SimFleet") -> None:
        self.cloud = cloud

    def provision(self, batch: int, slots: Sequence[NodeSlot]) -> ProvisionResult:
        c = self.cloud
        if not 1 <= batch <= len(c.plan.batches):
            raise ProvisioningError(f"batch {batch} is not in the plan (batches 1..{len(c.plan.batches)})")
        unknown = [s.name for s in slots if s.name not in c.slots]
        if unknown:
            raise ProvisioningError(f"slot(s) not in the plan: {', '.join(unknown[:5])}")
        current = c.ledger.current()
        launched, events = [], []
        short: dict[str, str] = {}
        for slot in c.plan.nodes:  # a stopped or terminated slot gets a new instance only through replace
            if slot.batch > batch or slot.name in current or c.ledger.newest_generation(slot.name) is not None:
                continue
            if c.ledger.shortfalls(slot.name) < c.faults.shortfall.get(slot.name, 0):
                events.append({"event": "shortfall", "slot": slot.name, "batch": slot.batch})
                short[slot.name] = ICE.format(t=c.sku.name, az=c.plan.availability_zone)
                continue
            inst = c.first_instance(slot)
            launched.append(inst)
            events.append(_launch(inst, "provision"))
        c.ledger.append(events)
        current = c.ledger.current()
        instances = {s.name: port_instance(current[s.name]) for s in slots if s.name in current}
        shortfall = {s.name: short.get(s.name) or f"batch {s.batch} is beyond the batch target {batch}"
                     for s in slots if s.name not in current}
        d = c.config.durations
        duration = d.provision_api + d.boot if launched else 0.0
        return ProvisionResult(instances=instances, shortfall=shortfall, duration_s=duration)

    @property
    def launch_duration_s(self) -> float:
        """The modelled seconds of one replacement's launch: the same API call and boot as any launch
        (the rollout reads it: a replacement's launch is on the clock like a batch's)."""
        d = self.cloud.config.durations
        return d.provision_api + d.boot

    def replace(self, slot: NodeSlot, action: ReplaceAction, *, instance_id: str | None = None) -> Instance:
        """Stop (and report) or terminate the slot's instance, launch a new one into the slot.

        `instance_id`, when given, is the instance the caller means to replace: if the slot already
        runs another one, that replacement happened (a resumed caller repeating itself) and the
        current instance is returned, launching nothing."""
        c = self.cloud
        if slot.name not in c.slots:
            raise ProvisioningError(f"slot {slot.name} is not in the plan")
        if action not in ("stop-and-report", "terminate"):
            raise ProvisioningError(f"unknown replace action {action!r}; expected stop-and-report or terminate")
        old = c.ledger.current().get(slot.name)
        if instance_id is not None and old is not None and old.instance_id != instance_id:
            return port_instance(old)
        newest = c.ledger.newest_generation(slot.name)
        generation = 0 if newest is None else newest + 1
        tag = c.ledger.newest_tag(slot.name)
        new = (c.first_instance(slot) if generation == 0 else
               c.replacement_instance(slot, generation, ami=c.ledger.image(slot.name),
                                      tag_generation=0 if tag is None else tag + 1))
        events = []
        if old is not None:
            events.append({"event": "stop" if action == "stop-and-report" else "terminate", "slot": slot.name,
                           "instance_id": old.instance_id})
        events.append(_launch(new, "replace"))
        c.ledger.append(events)
        return port_instance(new)

    def inventory(self) -> Mapping[str, Instance]:
        return {slot: port_instance(i) for slot, i in sorted(self.cloud.ledger.current().items())}

    def terminate(self, slots: Sequence[str]) -> list[str]:
        """A shrink's end (gpufleet.plan.resize): terminate the slots' instances, launching nothing
        into them again. Idempotent: a slot with no running instance is skipped. Returns the ids."""
        current = self.cloud.ledger.current()
        events = [{"event": "terminate", "slot": s, "instance_id": current[s].instance_id}
                  for s in slots if s in current]
        self.cloud.ledger.append(events)
        return [e["instance_id"] for e in events]

    # -- gpufleet.daytwo.reimage.Reimager

    def images(self) -> Mapping[str, str | None]:
        """slot -> the AMI its running instance booted."""
        return {slot: i.ami for slot, i in sorted(self.cloud.ledger.current().items())}

    def reimage(self, slots: Sequence[NodeSlot], ami: str) -> ProvisionResult:
        """Replace each slot's instance with one booted from `ami`. A slot already running `ami` is
        left alone (a resumed caller repeating itself never reimages twice); an AMI the catalogue
        does not know is EC2's InvalidAMIID.NotFound, before anything is touched."""
        c = self.cloud
        image = c.images.of(ami)
        if image is None:
            raise ProvisioningError(f"InvalidAMIID.NotFound: The image id '[{ami}]' does not exist",
                                    slots=tuple(s.name for s in slots))
        unknown = [s.name for s in slots if s.name not in c.slots]
        if unknown:
            raise ProvisioningError(f"slot(s) not in the plan: {', '.join(unknown[:5])}")
        current = c.ledger.current()
        events: list[dict] = []
        launched: list[SimInstance] = []
        for slot in slots:
            old = current.get(slot.name)
            if old is not None and old.ami == ami:
                continue
            newest = c.ledger.newest_generation(slot.name)
            new = c.replacement_instance(slot, 0 if newest is None else newest + 1, ami=ami, ahead=len(launched),
                                         tag_generation=c.ledger.newest_tag(slot.name) or 0)
            if old is not None:
                events.append({"event": "terminate", "slot": slot.name, "instance_id": old.instance_id})
            events.append(_launch(new, "reimage"))
            launched.append(new)
        # what the image carries is on the new instances before the ledger says they exist
        c.installed.record([i.instance_id for i in launched], image["bom_digest"], image["versions"])
        c.ledger.append(events)
        now = c.ledger.current()
        d = c.config.durations
        return ProvisionResult(instances={s.name: port_instance(now[s.name]) for s in slots},
                               duration_s=d.provision_api + d.boot if launched else 0.0)


def _launch(inst: SimInstance, by: str) -> dict:
    return {"event": "launch", "slot": inst.slot, "instance_id": inst.instance_id, "private_ip": inst.private_ip,
            "batch": inst.batch, "block": inst.block, "generation": inst.generation, "ami": inst.ami,
            "tag_generation": inst.tag_generation, "by": by}
