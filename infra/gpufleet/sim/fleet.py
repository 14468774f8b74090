"""The simulated fleet's state: each instance, what is wrong with it right now, what it renders.

Apart from gpufleet.sim.cloud, which opens the fleet and builds its three adapters on it, so that
the adapters (executor, launcher, provisioner) read the fleet without importing their builder.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from gpufleet import catalog
from gpufleet.bom import Bom
from gpufleet.errors import ProvisioningError
from gpufleet.gates import synth
from gpufleet.plan.model import ClusterPlan, NodeSlot
from gpufleet.project import Project
from gpufleet.sim import world as W
from gpufleet.sim.clock import VirtualClock
from gpufleet.sim.faults import FaultPlan, Truth, active_faults, jitter
from gpufleet.sim.installed import IMAGES_FILE, INSTALLED_FILE, VERSION_FAULTS_FILE, Installed, SimImages, VersionFaults
from gpufleet.sim.late import LATE_FILE, LateFaults
from gpufleet.sim.render import BundleWriter, NodeIdentity, NodeLook, versions_key
from gpufleet.spec import ClusterSpec, SimulatorConfig


@dataclass(frozen=True)
class NodeProfile:
    """One instance as the simulator sees it: who it is and what is wrong with it right now."""

    who: NodeIdentity
    generation: int
    fault: str | None  # the instance's seeded fault, unless a remediation cleared it
    systemic: str
    factor: float  # bandwidth factor (jitter around 1.0)

    @property
    def reachable(self) -> bool:
        return self.fault != "unreachable"


class SimFleet:
    """The fleet's state under `<state_dir>/sim/`: `ledger` (what the cloud did,
    gpufleet.sim.world.Ledger), `clock` (VirtualClock), `truth()` (the seeded ground truth),
    `profile(instance)` and `look(profile)` (what an instance is and renders as of now)."""

    def __init__(self, spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str,
                 program: dict[str, dict[str, str]], bom: Bom, faults: FaultPlan) -> None:
        assert spec.simulator is not None
        self.spec, self.plan, self.project, self.stack = spec, plan, project, stack
        self.config: SimulatorConfig = spec.simulator
        self.sku = catalog.get(plan.instance_type)
        self.program = program
        self.dir = project.state_dir(stack) / "sim"
        self.ledger = W.Ledger(self.dir / W.LEDGER)
        self.remedies = W.Remedies(self.dir / W.REMEDIES)
        self.late = LateFaults(self.dir / LATE_FILE)
        self.installed = Installed(self.dir / INSTALLED_FILE)  # per instance: what its last configure installed
        self.version_faults = VersionFaults(self.dir / VERSION_FAULTS_FILE)
        self.images = SimImages(self.dir / IMAGES_FILE)  # what each AMI the program hands out carries
        self.faults = faults
        self.slots: dict[str, NodeSlot] = {s.name: s for s in plan.nodes}
        self.bom = bom
        self.versions = synth.bom_versions(bom, spec.image.os)  # what a node built from the BOM runs
        self.clock = VirtualClock()
        self.writer = BundleWriter()
        self._subnet = ipaddress.IPv4Network(plan.network.compute.cidr)
        self._last_planned_ip = max(int(ipaddress.IPv4Address(p["private_ip"])) for p in program.values())
        self._versions_key = versions_key(self.versions)
        for ami in sorted({p["ami"] for p in program.values() if p.get("ami")}):
            self.images.register(ami, bom.digest(), self.versions)  # built from the stack's BOM

    # ---- ground truth
    def truth(self) -> Truth:
        return self.faults.truth()

    # ---- identities
    def first_instance(self, slot: NodeSlot) -> W.SimInstance:
        p = self.program[slot.name]
        return W.SimInstance(slot.name, p["instance_id"], p["private_ip"], slot.batch, slot.block, 0, ami=p.get("ami"))

    def replacement_instance(self, slot: NodeSlot, generation: int, ami: str | None = None,
                             ahead: int = 0, tag_generation: int = 0) -> W.SimInstance:
        """A deterministic new id; the IP is the next free address of the compute subnet after the
        highest one the program gave a planned slot, one per replacement or reimage in ledger order
        (`ahead`: relaunches of the same call not in the ledger yet)."""
        offset = self._last_planned_ip + 1 + self.ledger.relaunches() + ahead
        if offset >= int(self._subnet.broadcast_address):
            raise ProvisioningError(f"the compute subnet {self._subnet} has no address left for a replacement "
                                    f"of {slot.name}")
        iid = "i-" + W.cache_key(self.stack, slot.name, str(generation))[:17]
        return W.SimInstance(slot.name, iid, str(ipaddress.IPv4Address(offset)), slot.batch, slot.block, generation,
                             ami=ami, tag_generation=tag_generation)

    def profile(self, inst: W.SimInstance) -> NodeProfile:
        seeded = self.faults.fault_of(inst.slot, inst.generation)
        late = self.late.of(inst)  # a fault the node developed after admission (gpufleet.sim.late)
        seeded = late.kind if late is not None else seeded
        who = NodeIdentity(inst.slot, inst.instance_id, inst.private_ip, inst.batch, inst.block, self.stack)
        factor = jitter(self.config.seed, inst.slot, inst.generation)
        if self.version_faults.factors:  # a release that slows every node running it (gpufleet.sim.installed)
            factor *= self.version_faults.factor(self.installed.versions(inst.instance_id) or self.versions)
        return NodeProfile(who=who, generation=inst.generation,
                           fault=active_faults(seeded, self.remedies.of(inst.instance_id)),
                           systemic=self.config.systemic, factor=factor)

    def look(self, p: NodeProfile) -> NodeLook:
        """What decides the node's bundle apart from its names (the render template's key)."""
        installed = self.installed.versions(p.who.instance_id)
        versions = versions_key(installed) if installed is not None else self._versions_key
        return NodeLook(instance_type=self.sku.name, os=self.spec.image.os, versions=versions,
                        fault=p.fault, systemic=p.systemic, factor=p.factor, dcgm_level=self.spec.gates.dcgm_level,
                        workload_image=self.spec.acceptance.workload_image, pool=self.spec.pool.type)

    def node_outputs(self, slot: str) -> dict[str, tuple[str, int]]:
        """The raw tool outputs of the slot's running instance (bundle file name -> (output, exit
        code)), as of now: for stub GPU tools on rehearsal hosts, so real transport carries exactly
        what the simulated executor would have written."""
        inst = self.ledger.current().get(slot)
        if inst is None:
            raise ProvisioningError(f"slot {slot} has no running instance")
        p = self.profile(inst)
        return self.writer.outputs(self.look(p), p.who, self.clock.now())

    def running(self, instance_id: str) -> W.SimInstance | None:
        inst = self.ledger.instance(instance_id)
        return inst if inst is not None and inst.state == "running" else None
