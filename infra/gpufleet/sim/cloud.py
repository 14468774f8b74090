"""The simulated cloud: the fleet from the real plan and the real Pulumi program under mocks,
seeded faults, durable state (gpufleet.sim.fleet), and the three adapters built on it.

Why the real program: the instances (names, ids, private IPs) are whatever `infra/__main__.py`
registers under `pulumi.runtime.set_mocks` with every batch raised, so the simulator exercises
the real infrastructure code. It runs once per stack state: the captured instance list is cached
under `<state_dir>/sim/program.json`, keyed by the spec, and a resumed process reads it back.
"""

from __future__ import annotations

import json
from pathlib import Path

import gpufleet
from gpufleet.bom import Bom, load_bom
from gpufleet.errors import ConfigError, ProvisioningError
from gpufleet.plan.model import ClusterPlan
from gpufleet.project import Project
from gpufleet.sim import world as W
from gpufleet.sim.executor import SimExecutor
from gpufleet.sim.fabric import SimLauncher
from gpufleet.sim.faults import FaultPlan, check_image_faults, place_faults
from gpufleet.sim.fleet import SimFleet
from gpufleet.sim.provisioner import SimProvisioner
from gpufleet.spec import ClusterSpec

INSTANCE_TYPE = "aws:ec2/instance:Instance"


def captured_instances(spec: ClusterSpec, plan: ClusterPlan, stack: str,
                       known: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """slot -> {instance_id, private_ip} as the real program registers them under mocks, every batch up.

    `known`: what an earlier capture gave slots this one may not register (a stack shrunk by whole
    blocks keeps slots past its new target: gpufleet.plan.resize); kept for those slots only."""
    from gpufleet.program.capture import capture_program

    cap = capture_program(spec, stack=stack, target_batch=len(plan.batches))
    slots = {s.name for s in plan.nodes}
    out = {}
    for r in cap.of_type(INSTANCE_TYPE):
        if r.name in slots:  # GPU nodes only (a Slurm head node is an instance too)
            out[r.name] = {"instance_id": r.outputs["id"], "private_ip": r.outputs["privateIp"], "ami": r.inputs["ami"]}
    for name, entry in (known or {}).items():
        if name in slots and name not in out:
            out[name] = entry
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


def _settings(spec: ClusterSpec) -> str:
    return W.cache_key(spec.simulator.model_dump_json() if spec.simulator is not None else "")


def _keep_the_world(directory: Path, faults: FaultPlan, spec: ClusterSpec, project: Project, stack: str,
                    plan: ClusterPlan) -> FaultPlan:
    """A cloud that has launched instances keeps the faults it was seeded with: a changed fault mix
    (or seed) would silently change instances that already exist, so it is refused. A plan that
    changed under the same simulator settings (a grow or shrink by whole blocks: gpufleet.plan.resize)
    keeps the stored placement: the existing slots keep their faults, new slots come healthy."""
    stored = W.read_json(directory / W.FAULTS)
    if stored is None or stored.get("digest") == faults.digest() or not W.Ledger(directory / W.LEDGER).events:
        return faults
    if stored.get("settings") == _settings(spec):
        batch_of = {s.name: s.batch for s in plan.nodes}
        return FaultPlan(faults=dict(stored.get("faults") or {}),
                         bad_links=tuple((a, b) for a, b in stored.get("bad_links") or ()),
                         shortfall={k: int(v) for k, v in (stored.get("shortfall") or {}).items()},
                         bad_replacements={k: int(v) for k, v in (stored.get("bad_replacements") or {}).items()},
                         systemic=str(stored.get("systemic", "none")), batch_of=batch_of)
    raise ConfigError("the simulator's seed, fault mix or plan changed after this stack's simulated cloud launched "
                      "instances", path=str(project.stack_file(stack)), field="gpufleet:simulator",
                      expected=f"the settings it was created with, or a fresh simulated cloud (remove {directory})")


class SimulatedCloud(SimFleet):
    """Entry point: `SimulatedCloud.open(spec, plan, project, stack)`.

    Attributes the rollout builds on: `provisioner` (gpufleet.ports.Provisioner),
    `executor` (Executor), `launcher` (gpufleet.pool.protocol.Launcher), `ledger` (what the cloud
    did, gpufleet.sim.world.Ledger), `clock` (VirtualClock), `truth()` (the seeded ground truth).
    """

    def __init__(self, spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str,
                 program: dict[str, dict[str, str]], bom: Bom, faults: FaultPlan) -> None:
        super().__init__(spec, plan, project, stack, program, bom, faults)
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
        faults = _keep_the_world(directory, faults, spec, project, stack, plan)
        directory.mkdir(parents=True, exist_ok=True)
        W.write_atomic(directory / W.FAULTS, json.dumps({**faults.to_json(), "settings": _settings(spec)},
                                                        sort_keys=True, indent=1))
        key = program_cache_key(spec, stack)
        program = W.read_program_cache(directory / W.PROGRAM, key)
        if program is None:  # captured again; slots a shrink kept past the new target keep their entries
            old = W.read_json(directory / W.PROGRAM)
            known = old.get("instances") if isinstance(old, dict) and isinstance(old.get("instances"), dict) else None
            program = captured_instances(spec, plan, stack, known)
            W.write_program_cache(directory / W.PROGRAM, key, program)
        return cls(spec, plan, project, stack, program, bom, faults)
