"""The Provisioner port over machines that already exist: an inventory file, one host per slot.

Why: bare-metal and on-prem fleets (and the rehearsal's network-namespace hosts) are not created
by Pulumi; they are racked, imaged and reachable already. The rollout gates them exactly like
cloud instances (configure, preflight, gates, multi-node baselines, admit or quarantine); only
"provision" shrinks to "look up the slot's host". A static host cannot be swapped by software, so
`replace` refuses: a quarantined slot stays short until an operator repairs or swaps the machine,
edits the inventory and clears the slot (`gpufleet pool clear`); give such a stack
`spareFraction: 0`, and the rollout ends short of its target (exit 3) naming the slots.

The inventory (YAML):

    hosts:
      - slot: <a slot of the plan, e.g. prod-b0000-n00000>
        address: <the IP or DNS name the executor and the pool reach it at>
        instanceId: <optional: an asset tag or serial; default static-<slot>>

Every entry is checked before anything runs: the slot must be the plan's, slots and addresses
must be unique, and the file must name a host for at least one slot (a plan slot without a
host is reported as a shortfall when its batch is provisioned).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from gpufleet.errors import ConfigError, ProvisioningError
from gpufleet.plan.model import ClusterPlan, NodeSlot
from gpufleet.ports import Instance, ProvisionResult, ReplaceAction

ENTRY_KEYS = {"slot", "address", "instanceId"}


def parse_inventory(data: Any, plan: ClusterPlan, source: str) -> dict[str, Instance]:
    """slot -> Instance for every host of the inventory document `data` (read from `source`)."""
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, list) or not hosts:
        raise ConfigError("the inventory lists no hosts", path=source, field="hosts",
                          expected="a list of {slot, address[, instanceId]}")
    slots = {s.name: s for s in plan.nodes}
    out: dict[str, Instance] = {}
    seen_addresses: dict[str, str] = {}
    for i, entry in enumerate(hosts):
        where = f"hosts[{i}]"
        if not isinstance(entry, dict) or not {"slot", "address"} <= set(entry) or set(entry) - ENTRY_KEYS:
            raise ConfigError(f"entry {entry!r} is not a host", path=source, field=where,
                              expected="keys slot and address, optionally instanceId, and nothing else")
        slot, address = str(entry["slot"]), str(entry["address"]).strip()
        if slot not in slots:
            first = ", ".join(list(slots)[:3])
            raise ConfigError(f"slot {slot!r} is not in the plan", path=source, field=f"{where}.slot",
                              expected=f"one of the plan's {len(slots)} slots ({first}, ...)")
        if slot in out:
            raise ConfigError(f"slot {slot} is listed twice", path=source, field=f"{where}.slot",
                              expected="one host per slot")
        if not address:
            raise ConfigError("empty address", path=source, field=f"{where}.address",
                              expected="the IP or DNS name the host is reached at")
        if address in seen_addresses:
            raise ConfigError(f"address {address} is already slot {seen_addresses[address]}'s", path=source,
                              field=f"{where}.address", expected="one slot per host")
        seen_addresses[address] = slot
        plan_slot = slots[slot]
        out[slot] = Instance(slot=slot, instance_id=str(entry.get("instanceId") or f"static-{slot}"),
                             batch=plan_slot.batch, block=plan_slot.block, private_ip=address)
    return out


class StaticHostsProvisioner:
    """`gpufleet.ports.Provisioner` over an inventory of existing hosts (see the module doc)."""

    def __init__(self, hosts: Mapping[str, Instance], source: str) -> None:
        self.hosts = dict(hosts)
        self.source = source

    @classmethod
    def from_file(cls, path: Path, plan: ClusterPlan) -> "StaticHostsProvisioner":
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read the host inventory: {exc}", path=str(path),
                              expected="a readable UTF-8 YAML file with a `hosts` list") from None
        return cls(parse_inventory(data, plan, str(path)), str(path))

    def provision(self, batch: int, slots: Sequence[NodeSlot]) -> ProvisionResult:
        """The slots' hosts; a slot the inventory does not name is a shortfall (never an error)."""
        up = {s.name: self.hosts[s.name] for s in slots if s.name in self.hosts}
        short = {s.name: f"no host for this slot in the inventory {self.source}" for s in slots
                 if s.name not in self.hosts}
        return ProvisionResult(instances=up, shortfall=short)

    def replace(self, slot: NodeSlot, action: ReplaceAction) -> Instance:
        host = self.hosts[slot.name].private_ip if slot.name in self.hosts else "no host"
        raise ProvisioningError(f"{slot.name} is a static host ({host}): it cannot be "
                                f"replaced by software; repair or swap the machine, update {self.source} and "
                                "clear the slot, and give static stacks spareFraction: 0", slots=(slot.name,))

    def inventory(self) -> Mapping[str, Instance]:
        return dict(self.hosts)
