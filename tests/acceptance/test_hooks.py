"""The acceptance stages inside a real rollout (the orchestrator over the rollout tests' fake
cloud): healthy stages let it finish; a slow file system halts it before anything is
provisioned; a diverging smoke rank halts it after the canary; a resumed rollout reads the
journaled verdicts instead of collecting again, and reproduces a stage's halt."""

from __future__ import annotations

import json

from gpufleet import catalog
from gpufleet.rollout.acceptance import AcceptanceHooks, AcceptanceRunner
from gpufleet.rollout.state import BatchStage
from gpufleet.sim.acceptance import AcceptanceFaults, SimAcceptanceCollector
from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec


class Counting(SimAcceptanceCollector):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.stages: list[str] = []

    def collect(self, stage, nodes, pairs, out):
        self.stages.append(stage)
        return super().collect(stage, nodes, pairs, out)


def _run(tmp_path, faults=AcceptanceFaults(), cloud=None):
    cloud = cloud or FakeCloud()
    o = orchestrator(tmp_path, cloud)
    spec = small_spec()
    sku = catalog.get(spec.cluster.instance_type)
    collector = Counting(spec.storage, o.plan.storage, sku, spec.acceptance, seed=1, faults=faults)
    o.hooks = AcceptanceHooks(AcceptanceRunner(spec, o.plan, tmp_path / "state", collector, sku, journal=o.journal))
    return o.run(), cloud, collector


def test_healthy_stages_let_the_rollout_finish_and_resume_reads_the_journal(tmp_path):
    out, cloud, collector = _run(tmp_path)
    assert out.finished and collector.stages == ["storage", "network", "smoke"]
    assert {s: (a.status.value, a.attempt) for s, a in out.state.acceptance.items()} == {
        "storage": ("passed", 1), "network": ("passed", 1), "smoke": ("passed", 1)}
    assert (tmp_path / "state" / "baselines" / "training.json").is_file()
    again, _, second = _run(tmp_path, cloud=cloud)
    assert second.stages == [] and again.finished  # every verdict was journaled


def test_a_slow_file_system_halts_before_any_node_is_provisioned_and_again_on_resume(tmp_path):
    out, cloud, collector = _run(tmp_path, AcceptanceFaults(slow_storage=0.3))
    assert out.halted and "acceptance storage failed (storage-write-slow" in out.halt_reason
    assert cloud.ledger == [] and collector.stages == ["storage"]
    assert out.state.acceptance["storage"].status.value == "failed" and "network" not in out.state.acceptance
    again, _, second = _run(tmp_path, cloud=cloud)  # a healthy collector now: the journaled verdict still halts
    assert again.halted and again.halt_reason == out.halt_reason and second.stages == []


def test_a_diverging_rank_halts_after_the_canary(tmp_path):
    o = orchestrator(tmp_path / "probe", FakeCloud())
    canary = [n.name for n in o.plan.batch_nodes(1)]
    out, _, collector = _run(tmp_path, AcceptanceFaults(diverging_node=canary[1]))
    assert out.halted and "smoke-ranks-diverged" in out.halt_reason and canary[1] in out.halt_reason
    assert out.state.batches[1].stage is BatchStage.PASSED and collector.stages[-1] == "smoke"


def test_stack_hooks_on_a_simulated_stack_only(tmp_path):
    from gpufleet.plan import build_plan
    from gpufleet.rollout.acceptance import stack_hooks
    from gpufleet.spec import load_stack

    spec = load_stack("local")
    hooks = stack_hooks(spec, build_plan(spec), tmp_path)
    assert hooks is not None and hooks.before_batches() is None
    events = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert [(e["stage"], e["to"]) for e in events] == [("storage", "started"), ("storage", "passed"),
                                                       ("network", "started"), ("network", "passed")]
    assert not list((tmp_path / "acceptance").glob("*.json"))  # the journal holds the outcomes, not files
    real = spec.model_copy(update={"simulator": None})
    assert stack_hooks(real, build_plan(spec), tmp_path) is None
