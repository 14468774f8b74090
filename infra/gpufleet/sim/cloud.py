"""The simulated cloud: the fleet from the real plan and the real Pulumi program under mocks,
seeded faults, durable state, and the three adapters built on it.

Why the real program: the instances (names, ids, private IPs) are whatever `infra/__main__.py`
registers under `pulumi.runtime.set_mocks` with every batch raised, so the simulator exercises
the real infrastructure code. It runs once per stack state: the captured instance list is cached
under `<state_dir>/sim/program.json`, keyed by the spec, and a resumed process reads it back.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

import gpufleet
from gpufleet import catalog
from gpufleet.bom import Bom, load_bom
from gpufleet.errors import ConfigError, ProvisioningError
from gpufleet.plan.model import ClusterPlan, NodeSlot
from gpufleet.project import Project
from gpufleet.gates import synth
from gpufleet.sim import world as W
from gpufleet.sim.clock import VirtualClock
from gpufleet.sim.executor import SimExecutor
from gpufleet.sim.fabric import SimLauncher
from gpufleet.sim.installed import IMAGES_FILE, INSTALLED_FILE, VERSION_FAULTS_FILE, Installed, SimImages, VersionFaults
from gpufleet.sim.late import LATE_FILE, LateFaults
from gpufleet.sim.faults import FaultPlan, Truth, active_faults, check_image_faults, jitter, place_faults
from gpufleet.sim.provisioner import SimProvisioner
from gpufleet.sim.render import BundleWriter, NodeIdentity, NodeLook, versions_key
from gpufleet.spec import ClusterSpec, SimulatorConfig

INSTANCE_TYPE = "aws:ec2/instance:Instance"


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


def captured_instances(spec: ClusterSpec, plan: ClusterPlan, stack: str) -> dict[str, dict[str, str]]:
    """slot -> {instance_id, private_ip} as the real program registers them under mocks, every batch up."""
    from gpufleet.cloud.capture import capture_program

    cap = capture_program(spec, stack=stack, target_batch=len(plan.batches))
    slots = {s.name for s in plan.nodes}
    out = {}
    for r in cap.of_type(INSTANCE_TYPE):
        if r.name in slots:  # GPU nodes only (a Slurm head node is an instance too)
            out[r.name] = {"instance_id": r.outputs["id"], "private_ip": r.outputs["privateIp"], "ami": r.inputs["ami"]}
    missing = [s.name for s in plan.nodes if s.name not in out]
    if missing:
        raise ProvisioningError(f"the Pulumi program registered no instance for {len(missing)} slot(s) "
                                f"of the plan, e.g. {missing[0]}")
    return out


def program_cache_key(spec: ClusterSpec, stack: str) -> str:
    """What the captured instances depend on: the stack, its spec (the simulator's own settings
    aside: the program never reads them), the code version."""
    return W.cache_key(stack, spec.model_dump_json(by_alias=True, exclude={"simulator"}), gpufleet.__version__,
                       "with-ami")


def _keep_the_world(directory: Path, faults: FaultPlan, spec: ClusterSpec, project: Project, stack: str) -> None:
    """A cloud that has launched instances keeps the faults it was seeded with: a changed fault mix
    (or seed, or plan) would silently change instances that already exist, so it is refused."""
    stored = W.read_json(directory / W.FAULTS)
    if stored is None or stored.get("digest") == faults.digest() or not W.Ledger(directory / W.LEDGER).events:
        return
    raise ConfigError("the simulator's seed, fault mix or plan changed after this stack's simulated cloud launched "
                      "instances", path=str(project.stack_file(stack)), field="gpufleet:simulator",
                      expected=f"the settings it was created with, or a fresh simulated cloud (remove {directory})")


class SimulatedCloud:
    """Entry point: `SimulatedCloud.open(spec, plan, project, stack)`.

    Attributes the rollout builds on: `provisioner` (gpufleet.rollout.ports.Provisioner),
    `executor` (Executor), `launcher` (gpufleet.pool.protocol.Launcher), `ledger` (what the cloud
    did, gpufleet.sim.world.Ledger), `clock` (VirtualClock), `truth()` (the seeded ground truth).
    """

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
        self.provisioner = SimProvisioner(self)
        self.executor = SimExecutor(self)
        self.launcher = SimLauncher(self)

    @classmethod
    def open(cls, spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str) -> "SimulatedCloud":
        """Open (or resume) the simulated cloud of a simulated stack; state under `<state_dir>/sim/`."""
        if spec.simulator is None:
            raise ConfigError("not a simulated stack", path=str(project.stack_file(stack)), field="gpufleet:simulator",
                              expected="a `gpufleet:simulator` key (the local stacks have one)")
        try:
            check_image_faults(spec.simulator, spec.acceptance.workload_image)
            faults = place_faults(plan, spec.simulator)
        except ConfigError as exc:  # checked before anything is written
            raise ConfigError(exc.message, path=str(project.stack_file(stack)), field=exc.field,
                              expected=exc.expected) from None
        bom = load_bom(project.path(spec.image.bom))
        directory = project.state_dir(stack) / "sim"
        _keep_the_world(directory, faults, spec, project, stack)
        directory.mkdir(parents=True, exist_ok=True)
        W.write_atomic(directory / W.FAULTS, json.dumps(faults.to_json(), sort_keys=True, indent=1))
        key = program_cache_key(spec, stack)
        program = W.read_program_cache(directory / W.PROGRAM, key)
        if program is None:
            program = captured_instances(spec, plan, stack)
            W.write_program_cache(directory / W.PROGRAM, key, program)
        return cls(spec, plan, project, stack, program, bom, faults)

    # ---- ground truth
    def truth(self) -> Truth:
        return self.faults.truth()

    # ---- identities
    def first_instance(self, slot: NodeSlot) -> W.SimInstance:
        p = self.program[slot.name]
        return W.SimInstance(slot.name, p["instance_id"], p["private_ip"], slot.batch, slot.block, 0, ami=p.get("ami"))

    def replacement_instance(self, slot: NodeSlot, generation: int, ami: str | None = None,
                             ahead: int = 0) -> W.SimInstance:
        """A deterministic new id; the IP is the next free address of the compute subnet after the
        highest one the program gave a planned slot, one per replacement or reimage in ledger order
        (`ahead`: relaunches of the same call not in the ledger yet)."""
        offset = self._last_planned_ip + 1 + self.ledger.relaunches() + ahead
        if offset >= int(self._subnet.broadcast_address):
            raise ProvisioningError(f"the compute subnet {self._subnet} has no address left for a replacement "
                                    f"of {slot.name}")
        iid = "i-" + W.cache_key(self.stack, slot.name, str(generation))[:17]
        return W.SimInstance(slot.name, iid, str(ipaddress.IPv4Address(offset)), slot.batch, slot.block, generation,
                             ami=ami)

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
