"""The acceptance stages inside a real rollout (the orchestrator over the rollout tests' fake
cloud): healthy stages let it finish; a slow file system halts it before anything is
provisioned; a diverging smoke rank halts it after the canary; a resumed rollout re-reads the
recorded outcomes instead of collecting again."""

from __future__ import annotations

from infra import catalog
from infra.rollout.acceptance import AcceptanceHooks, AcceptanceRunner
from infra.rollout.state import BatchStage
from infra.sim.acceptance import AcceptanceFaults, SimAcceptanceCollector
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
    o.hooks = AcceptanceHooks(AcceptanceRunner(spec, o.plan, tmp_path / "acc", collector, sku))
    return o.run(), cloud, collector


def test_healthy_stages_let_the_rollout_finish_and_resume_reads_the_records(tmp_path):
    out, cloud, collector = _run(tmp_path)
    assert out.finished and collector.stages == ["storage", "network", "smoke"]
    assert (tmp_path / "acc" / "baselines" / "training.json").is_file()
    again, _, second = _run(tmp_path, cloud=cloud)
    assert second.stages == []  # every stage was recorded


def test_a_slow_file_system_halts_before_any_node_is_provisioned(tmp_path):
    out, cloud, collector = _run(tmp_path, AcceptanceFaults(slow_storage=0.3))
    assert out.halted and "acceptance storage failed (storage-write-slow" in out.halt_reason
    assert cloud.ledger == [] and collector.stages == ["storage"]


def test_a_diverging_rank_halts_after_the_canary(tmp_path):
    o = orchestrator(tmp_path / "probe", FakeCloud())
    canary = [n.name for n in o.plan.batch_nodes(1)]
    out, _, collector = _run(tmp_path, AcceptanceFaults(diverging_node=canary[1]))
    assert out.halted and "smoke-ranks-diverged" in out.halt_reason and canary[1] in out.halt_reason
    assert out.state.batches[1].stage is BatchStage.PASSED and collector.stages[-1] == "smoke"


def test_stack_hooks_on_a_simulated_stack_only(tmp_path):
    from infra.plan import build_plan
    from infra.rollout.acceptance import stack_hooks
    from infra.spec import load_stack

    spec = load_stack("local")
    hooks = stack_hooks(spec, build_plan(spec), tmp_path)
    assert hooks is not None and hooks.before_batches() is None
    assert {p.name for p in (tmp_path / "acceptance").glob("*.json")} == {"storage.json", "network.json"}
    real = spec.model_copy(update={"simulator": None})
    assert stack_hooks(real, build_plan(spec), tmp_path) is None
