"""The simulated stack answers the drift and audit reports as cloud and nodes, and can be told to drift.

What it answers (the Protocols of `gpufleet.reports.sources`):
- the fleet: the simulated cloud's running instances (its provisioner's inventory);
- Pulumi: the state is the ledger's running instances; a preview finds nothing (the simulator's
  instances are the real program's, by construction); a refresh shows the injected cloud changes;
- the cloud scan: the running instances plus injected orphans (tagged for the stack, not in the
  state); no security groups, launch templates, images or reservations are modelled;
- the nodes: each running node's versions are the BOM's (what `configure` installed), with the
  seeded `version-skew` fault (NCCL one minor behind, as its preflight bundle shows) and injected
  skew on top; an unreachable node, or one told to hide its facts, returns none; check mode
  reports the injected changed tasks;
- the baselines: the rollout's stored records, like a real stack.

Injections live in `<state_dir>/sim/drift.json` (replaced atomically), so they persist across
commands: `gpufleet sim inject -s local --skew nccl=2.26.5 --slot local-b0003-n00015`, then
`gpufleet audit -s local` names that node. `--clear` forgets them all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gpufleet import tagging as t
from gpufleet.errors import ConfigError
from gpufleet.gates import versions as gv
from gpufleet.plan.model import ClusterPlan
from gpufleet.project import Project
from gpufleet.reports.audit import NodeFacts
from gpufleet.reports.drift_cloud import CloudInstance, CloudScan, StateView, StepView
from gpufleet.reports.drift_software import CheckModeHost
from gpufleet.reports.sources import Sources, StoredBaselines
from gpufleet.rollout.ports import Instance
from gpufleet.sim.executor import unreachable_message
from gpufleet.sim.render import skewed
from gpufleet.sim.world import read_json, write_atomic
from gpufleet.spec import ClusterSpec

DRIFT_FILE = "drift.json"
INSTANCE_TYPE = "aws:ec2/instance:Instance"
NODE_PARENT = "gpufleet:compute:Compute"


@dataclass
class Injections:
    """What has been injected into a simulated stack (all keyed by slot, except orphans)."""

    skew: dict[str, dict[str, str]] = field(default_factory=dict)  # slot -> component -> installed version
    no_facts: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # slot -> check-mode tasks that would change
    orphans: list[dict[str, str]] = field(default_factory=list)  # {id, instance_type}
    cloud: dict[str, dict[str, str]] = field(default_factory=dict)  # slot -> instance output field -> cloud value

    @classmethod
    def load(cls, path: Path) -> Injections:
        doc = read_json(path)
        if not isinstance(doc, dict):
            return cls()
        return cls(skew=doc.get("skew") or {}, no_facts=doc.get("no_facts") or [], changed=doc.get("changed") or {},
                   orphans=doc.get("orphans") or [], cloud=doc.get("cloud") or {})

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"skew": self.skew, "no_facts": sorted(set(self.no_facts)),
                                       "changed": self.changed, "orphans": self.orphans, "cloud": self.cloud},
                                      sort_keys=True, indent=1))


def drift_file(project: Project, stack: str) -> Path:
    return project.state_dir(stack) / "sim" / DRIFT_FILE


def inject(project: Project, stack: str, plan: ClusterPlan, slots: Sequence[str], *,
           skew: Mapping[str, str] = {}, no_facts: bool = False, changed: Sequence[str] = (),
           orphans: int = 0, cloud: Mapping[str, str] = {}, instance_type: str = "") -> Injections:
    """Add injections for `slots` (checked against the plan and the BOM's component keys first:
    nothing is written on a bad argument)."""
    known = {s.name for s in plan.nodes}
    bad = [s for s in slots if s not in known]
    if bad:
        raise ConfigError(f"slot(s) {', '.join(bad)} not in the stack's plan", field="--slot",
                          expected=f"a slot name such as {plan.nodes[0].name}")
    unknown = [k for k in skew if k not in gv.BY_KEY]
    if unknown:
        raise ConfigError(f"unknown component(s) {', '.join(unknown)}", field="--skew",
                          expected="COMPONENT=VERSION with COMPONENT one of " + ", ".join(sorted(gv.BY_KEY)))
    if (skew or no_facts or changed or cloud) and not slots:
        raise ConfigError("nothing to inject into", field="--slot", expected="at least one --slot")
    path = drift_file(project, stack)
    inj = Injections.load(path)
    for s in slots:
        if skew:
            inj.skew.setdefault(s, {}).update(skew)
        if no_facts:
            inj.no_facts.append(s)
        if changed:
            inj.changed.setdefault(s, []).extend(x for x in changed if x not in inj.changed.get(s, []))
        if cloud:
            inj.cloud.setdefault(s, {}).update(cloud)
    start = len(inj.orphans)
    for n in range(orphans):
        inj.orphans.append({"id": f"i-0fab{start + n:013x}", "instance_type": instance_type})
    inj.save(path)
    return inj


def clear(project: Project, stack: str) -> None:
    drift_file(project, stack).unlink(missing_ok=True)


# ------------------------------------------------------------------ the sources

class SimPulumi:
    """The ledger as the stack's state; a refresh shows the injected cloud changes."""

    def __init__(self, cloud: Any, inj: Injections) -> None:
        self.cloud, self.inj = cloud, inj

    def _urn(self, slot: str) -> str:
        return f"urn:pulumi:{self.cloud.stack}::{self.cloud.project.name}::{NODE_PARENT}${INSTANCE_TYPE}::{slot}"

    def _outputs(self, inst: Any) -> dict[str, Any]:
        return {"id": inst.instance_id, "instanceType": self.cloud.sku.name, "privateIp": inst.private_ip,
                "tags": t.node_tags(t.base_tags(self.cloud.stack, self.cloud.plan.cluster), self.cloud.slots[inst.slot])}

    def preview(self) -> list[StepView]:
        return [StepView(op="same", urn=self._urn(s), type=INSTANCE_TYPE)
                for s in sorted(self.cloud.ledger.current())]

    def refresh(self) -> list[StepView]:
        steps = []
        for slot, inst in sorted(self.cloud.ledger.current().items()):
            changes = self.inj.cloud.get(slot)
            if not changes:
                steps.append(StepView(op="same", urn=self._urn(slot), type=INSTANCE_TYPE))
                continue
            old = self._outputs(inst)
            steps.append(StepView(op="update", urn=self._urn(slot), type=INSTANCE_TYPE,
                                  diffs=tuple(sorted(changes)), detailed={k: ("update", False) for k in changes},
                                  old_outputs=old, new_outputs={**old, **changes}))
        return steps

    def export(self) -> Mapping[str, Any]:
        resources = [{"urn": self._urn(slot), "type": INSTANCE_TYPE, "id": inst.instance_id, "custom": True,
                      "outputs": self._outputs(inst)}
                     for slot, inst in sorted(self.cloud.ledger.current().items())]
        return {"version": 3, "deployment": {"manifest": {}, "resources": resources}}


class SimScanner:
    """The running instances and the injected orphans, as EC2 would list them for the stack's tag."""

    def __init__(self, cloud: Any, inj: Injections) -> None:
        self.cloud, self.inj = cloud, inj

    def scan(self, state: StateView, reservation_ids: Sequence[str]) -> CloudScan:
        c = self.cloud
        tags = t.base_tags(c.stack, c.plan.cluster)
        ami = c.spec.image.ami_id or ""  # the simulator models no images: empty unless the stack pins one
        found = {inst.instance_id: CloudInstance(
            id=inst.instance_id, state="running", instance_type=self.inj.cloud.get(slot, {}).get("instanceType", c.sku.name),
            image_id=ami, subnet_id=None, placement_group=None, tags=t.node_tags(tags, c.slots[slot]),
            matched_by=("tag",))
            for slot, inst in c.ledger.current().items()}
        for o in self.inj.orphans:
            found[o["id"]] = CloudInstance(id=o["id"], state="running", instance_type=o.get("instance_type") or c.sku.name,
                                           image_id=ami, subnet_id=None, placement_group=None, tags=tags,
                                           matched_by=("tag",))
        return CloudScan(instances=found, rules={}, templates={}, reservations=())


class SimSoftware:
    """Each running node's installed versions and check-mode changes (see the module docstring)."""

    def __init__(self, cloud: Any, inj: Injections) -> None:
        self.cloud, self.inj = cloud, inj

    def versions(self, inst: Any) -> dict[str, str | None]:
        profile = self.cloud.profile(inst)
        versions: dict[str, str | None] = dict(self.cloud.versions)
        if profile.fault == "version-skew":
            versions["nccl"] = skewed(str(versions["nccl"]))
        versions.update(self.inj.skew.get(inst.slot, {}))
        return versions

    def collect(self, instances: Sequence[Instance]) -> tuple[dict[str, NodeFacts], dict[str, CheckModeHost]]:
        facts, hosts = {}, {}
        for i in instances:
            inst = self.cloud.running(i.instance_id)
            if inst is None or not self.cloud.profile(inst).reachable or i.slot in self.inj.no_facts:
                why = f"{i.instance_id} is not running" if inst is None else unreachable_message(inst.private_ip)
                facts[i.slot] = NodeFacts(i.slot, None, f"unreachable: {why}")
                hosts[i.slot] = CheckModeHost(i.slot, "unreachable", message=why)
                continue
            facts[i.slot] = NodeFacts(i.slot, self.versions(inst))
            hosts[i.slot] = CheckModeHost(i.slot, "ok", tuple(self.inj.changed.get(i.slot, ())))
        return facts, hosts


def sim_sources(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str) -> Sources:
    from gpufleet.sim.cloud import SimulatedCloud

    cloud = SimulatedCloud.open(spec, plan, project, stack)
    inj = Injections.load(drift_file(project, stack))
    return Sources(fleet=cloud.provisioner, pulumi=SimPulumi(cloud, inj), scanner=SimScanner(cloud, inj),
                   software=SimSoftware(cloud, inj), baselines=StoredBaselines(project.state_dir(stack)))
