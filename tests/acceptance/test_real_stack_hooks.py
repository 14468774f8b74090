"""The acceptance stages on a real stack's rollout (the orchestrator over the rollout tests' fake
cloud, the hooks placed as on a real stack): the base checks run on the canary's configured
hosts after its configure step and before its gates, a storage shortfall halts with the canary
bought and nothing after it, the smoke job runs on the canary's admitted nodes, a resumed
rollout collects no journaled stage again; and `stack_hooks` builds a real stack's collectors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import pytest

from gpufleet import catalog
from gpufleet.plan.model import StoragePlan
from gpufleet.pool.protocol import LaunchResult
from gpufleet.rollout.acceptance import (AcceptanceHooks, AcceptanceRunner, LauncherSmokeCollector, PoolLauncher,
                                      StageCollectors, stack_hooks)
from gpufleet.rollout.acceptance_collect import PlaybookAcceptanceCollector
from gpufleet.rollout.run_config import Adapters
from gpufleet.ports import StageResult
from gpufleet.rollout.state import BatchStage
from gpufleet.rollout.wiring import Wiring, acceptance_collector
from gpufleet.sim.acceptance import AcceptanceFaults, SimAcceptanceCollector
from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SPEC = small_spec()
SKU = catalog.get(SPEC.cluster.instance_type)


class Crash(Exception):
    """The process dying inside a stage's collection."""


@dataclass
class Call:
    stage: str
    nodes: list[str]
    provisioned: set[str]  # slots the cloud had bought when the stage was collected


@dataclass
class Recording:
    """A real stack's collector: the simulator's bundles, measured (not modelled) time, every call kept."""

    cloud: FakeCloud
    faults: AcceptanceFaults = AcceptanceFaults()
    crash_in: str | None = None  # the stage whose first collection dies
    plan_storage: StoragePlan | None = None
    calls: list[Call] = field(default_factory=list)

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        self.calls.append(Call(stage, list(nodes), {slot for _op, slot, _id in self.cloud.ledger}))
        if stage == self.crash_in:
            self.crash_in = None
            raise Crash(stage)
        sim = SimAcceptanceCollector(SPEC.storage, self.plan_storage, SKU, SPEC.acceptance, seed=1, faults=self.faults)
        return sim.collect(stage, nodes, pairs, out)

    @property
    def stages(self) -> list[str]:
        return [c.stage for c in self.calls]


def rollout(tmp_path: Path, collector: Recording):
    o = orchestrator(tmp_path, collector.cloud)
    collector.plan_storage = o.plan.storage
    runner = AcceptanceRunner(SPEC, o.plan, tmp_path / "state", collector, SKU, journal=o.journal)
    o.hooks = AcceptanceHooks(runner, on_hosts=True)
    return o


def events(tmp_path: Path) -> list[dict]:
    lines = (tmp_path / "state" / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def first(evs: list[dict], **match: object) -> int:
    return next(i for i, e in enumerate(evs) if all(e.get(k) == v for k, v in match.items()))


def test_base_checks_run_on_the_canarys_configured_hosts_after_configure_and_before_its_gates(tmp_path):
    collector = Recording(FakeCloud())
    o = rollout(tmp_path, collector)
    canary = {n.name for n in o.plan.batch_nodes(1)}
    out = o.run()
    assert out.finished and collector.stages == ["storage", "network", "smoke"]
    storage, network, smoke = collector.calls
    assert set(storage.nodes) <= canary and len(storage.nodes) == min(len(canary), SPEC.acceptance.storage_clients)
    assert set(network.nodes) == canary and storage.provisioned == canary  # the canary's hosts, nothing beyond
    evs = events(tmp_path)
    configured = first(evs, type="nodes", batch=1, to="configured")
    assert configured < first(evs, type="acceptance", stage="storage", to="started")
    assert first(evs, type="acceptance", stage="network", to="passed") < first(evs, type="nodes", batch=1,
                                                                                 to="preflight")
    assert first(evs, type="acceptance", stage="network", to="passed") < first(evs, type="gated", batch=1)
    admitted = {s for s in canary if out.state.nodes[s].stage.value == "admitted"}
    assert set(smoke.nodes) <= admitted and len(smoke.nodes) == SPEC.acceptance.smoke_nodes
    assert first(evs, type="batch", batch=1, to="passed") < first(evs, type="acceptance", stage="smoke", to="started")
    assert {s: a.status.value for s, a in out.state.acceptance.items()} == {
        "storage": "passed", "network": "passed", "smoke": "passed"}
    assert out.state.acceptance["storage"].timing == "measured"


def test_a_storage_shortfall_halts_after_the_canary_and_a_retry_continues(tmp_path):
    cloud = FakeCloud()
    slow = Recording(cloud, AcceptanceFaults(slow_storage=0.3))
    o = rollout(tmp_path, slow)
    canary = {n.name for n in o.plan.batch_nodes(1)}
    out = o.run()
    assert out.halted and "acceptance storage failed (storage-write-slow" in out.halt_reason
    assert {slot for _op, slot, _id in cloud.ledger} == canary  # nothing after the canary was bought
    assert slow.stages == ["storage"] and "network" not in out.state.acceptance
    assert not [e for e in events(tmp_path) if e.get("to") == "preflight" or e["type"] == "gated"]
    assert 2 not in out.state.batches or out.state.batches[2].stage is BatchStage.PENDING

    healthy = Recording(cloud)
    again = rollout(tmp_path, healthy).run()  # the journaled verdict halts again, collecting nothing
    assert again.halted and again.halt_reason == out.halt_reason and healthy.stages == []

    o = rollout(tmp_path, healthy)
    o.journal.append({"type": "acceptance", "stage": "storage", "to": "retry"})  # `--retry-stage storage`
    done = o.run()
    assert done.finished and not done.halted and healthy.stages == ["storage", "network", "smoke"]
    assert done.state.acceptance["storage"].attempt == 2


def test_a_resumed_rollout_collects_no_journaled_stage_again(tmp_path):
    cloud = FakeCloud()
    crashing = Recording(cloud, crash_in="network")
    with pytest.raises(Crash):
        rollout(tmp_path, crashing).run()
    assert crashing.stages == ["storage", "network"]
    resumed = Recording(cloud)
    out = rollout(tmp_path, resumed).run()
    assert out.finished and resumed.stages == ["network", "smoke"]  # storage's verdict was journaled
    assert out.state.acceptance["storage"].attempt == 1 and out.state.acceptance["network"].attempt == 2
    again = Recording(cloud)
    assert rollout(tmp_path, again).run().finished and again.stages == []


# --- stack_hooks on a real stack -------------------------------------------------------------------

@dataclass
class RecordingLauncher:
    specs: list = field(default_factory=list)

    def run(self, specs, timeout_s):
        self.specs += specs
        t = datetime(2026, 1, 1, tzinfo=timezone.utc)
        return [LaunchResult(name=s.name, nodes=s.nodes, command=" ".join(s.argv), exit_code=1, output="", started=t, ended=t)
                for s in specs]


@dataclass
class FakePool:
    kind: str
    launched: RecordingLauncher = field(default_factory=RecordingLauncher)
    asked: int = 0

    def launcher(self):
        self.asked += 1
        return self.launched


class NoPlaybooks:
    def run_playbook(self, stage, instances, playbook, extravars) -> StageResult:
        raise AssertionError("the unit test runs no playbook")


def real_wiring(kind: str) -> Wiring:
    cloud = FakeCloud()
    return Wiring(Adapters(cloud, cloud, FakePool(kind), cloud.clock), threaded=True,
                  acceptance=acceptance_collector(SPEC, NoPlaybooks(), cloud.inventory))


def test_stack_hooks_on_a_real_stack_take_the_playbook_and_the_launcher_collectors(tmp_path):
    from gpufleet.plan import build_plan

    plan = build_plan(SPEC)
    assert not SPEC.simulated and stack_hooks(SPEC, plan, tmp_path) is None  # nothing to run on without wiring
    wiring = real_wiring("slurm")
    hooks = stack_hooks(SPEC, plan, tmp_path, wiring=wiring)
    assert hooks is not None and hooks.on_hosts and hooks.smoke_unavailable is None
    collector = hooks.runner.collector
    assert isinstance(collector, StageCollectors)
    assert collector.by_stage["storage"] is wiring.acceptance is collector.by_stage["network"]
    assert isinstance(wiring.acceptance, PlaybookAcceptanceCollector)
    smoke = collector.by_stage["smoke"]
    assert isinstance(smoke, LauncherSmokeCollector) and isinstance(smoke.launcher, PoolLauncher)
    assert (smoke.python, smoke.script, smoke.data_dir) == (
        "python3", "/opt/gpufleet/workloads/train_smoke.py", "/fsx/gpufleet-acceptance/smoke")
    assert smoke.ranks_per_node == SKU.gpus and smoke.steps == SPEC.acceptance.smoke_steps
    assert hooks.before_batches() is None and not (tmp_path / "journal.jsonl").exists()  # no host is up yet

    pool = wiring.adapters.pool
    assert pool.asked == 0  # the pool's launcher is asked for at the launch, not before the stack exists
    smoke.collect("smoke", ["n1", "n2"], [], tmp_path / "bundle")
    spec, = pool.launched.specs
    assert pool.asked == 1 and "/opt/gpufleet/workloads/train_smoke.py" in spec.argv
    assert "--data-dir=/fsx/gpufleet-acceptance/smoke" in spec.argv and spec.argv[spec.argv.index(
        "/opt/gpufleet/workloads/train_smoke.py") - 1] == "python3"


def test_configured_smoke_paths_and_a_pool_without_the_smoke_launch(tmp_path):
    from gpufleet.plan import build_plan

    spec = SPEC.model_copy(update={"acceptance": SPEC.acceptance.model_copy(update={
        "smoke_python": "/opt/conda/bin/python", "smoke_script": "/shared/jobs/train_smoke.py"})})
    plan = build_plan(spec)
    smoke = stack_hooks(spec, plan, tmp_path / "a", wiring=real_wiring("slurm")).runner.collector.by_stage["smoke"]
    assert (smoke.python, smoke.script) == ("/opt/conda/bin/python", "/shared/jobs/train_smoke.py")

    hooks = stack_hooks(spec, plan, tmp_path / "k", wiring=real_wiring("kubernetes"))
    assert "smoke" not in hooks.runner.collector.by_stage and "kubernetes" in hooks.smoke_unavailable
    nodes = [n.name for n in plan.batch_nodes(1)][:2]
    hooks.runner.journal.append({"type": "rollout", "to": "started", "layout": "x", "batches": [1],
                                 "spare_nodes": 0, "instance_type": SPEC.cluster.instance_type})
    assert hooks.after_canary(nodes) is None  # journaled not applicable, with the reason, no job launched
    smoke_state = hooks.runner.journal.state.acceptance["smoke"]
    assert smoke_state.status.value == "not-applicable"
