"""The simulated stack answers the drift and audit reports as cloud and nodes.

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

The injections themselves (what `gpufleet sim inject` told the stack) are `gpufleet.sim.drift`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gpufleet import tagging as t
from gpufleet.plan.model import ClusterPlan
from gpufleet.project import Project
from gpufleet.reports.audit import NodeFacts
from gpufleet.reports.drift_cloud import INSTANCE_TYPE, CloudInstance, CloudScan, StateView, StepView
from gpufleet.reports.drift_software import CheckModeHost
from gpufleet.reports.sources import Sources, StoredBaselines
from gpufleet.ports import Instance
from gpufleet.sim.cloud import SimulatedCloud
from gpufleet.sim.drift import Injections, drift_file
from gpufleet.sim.executor import unreachable_message
from gpufleet.sim.render import skewed
from gpufleet.spec import ClusterSpec

NODE_PARENT = "gpufleet:compute:Compute"


class SimPulumi:
    """The ledger as the stack's state; a refresh shows the injected cloud changes."""

    def __init__(self, cloud: Any, inj: Injections) -> None:
        self.cloud, self.inj = cloud, inj

    def _urn(self, slot: str) -> str:
        return f"urn:pulumi:{self.cloud.stack}::{self.cloud.project.name}::{NODE_PARENT}${INSTANCE_TYPE}::{slot}"

    def _outputs(self, inst: Any) -> dict[str, Any]:
        return {"id": inst.instance_id, "instanceType": self.cloud.sku.name, "privateIp": inst.private_ip,
                "tags": t.node_tags(t.base_tags(self.cloud.stack, self.cloud.plan.cluster), self.cloud.slots[inst.slot],
                                    inst.tag_generation)}

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
            image_id=ami, subnet_id=None, placement_group=None, tags=t.node_tags(tags, c.slots[slot], inst.tag_generation),
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
    cloud = SimulatedCloud.open(spec, plan, project, stack)
    inj = Injections.load(drift_file(project, stack))
    return Sources(fleet=cloud.provisioner, pulumi=SimPulumi(cloud, inj), scanner=SimScanner(cloud, inj),
                   software=SimSoftware(cloud, inj), baselines=StoredBaselines(project.state_dir(stack)))
