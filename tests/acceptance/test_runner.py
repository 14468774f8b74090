"""The acceptance stages as rollout steps over the simulator: bundles, journaled verdicts, the
training baseline, resume without re-collecting, and a base-check failure that stops before the
next stage."""

from __future__ import annotations

import json
from pathlib import Path


from gpufleet.plan import build_plan
from gpufleet.rollout.acceptance import AcceptanceRunner, sample_pairs
from gpufleet.sim.acceptance import AcceptanceFaults, SimAcceptanceCollector
from gpufleet.spec import load_stack
from gpufleet import catalog


def _runner(tmp_path: Path, faults: AcceptanceFaults = AcceptanceFaults(), collector=None) -> AcceptanceRunner:
    spec = load_stack("local")
    plan = build_plan(spec)
    sku = catalog.get(spec.cluster.instance_type)
    collector = collector or SimAcceptanceCollector(spec.storage, plan.storage, sku, spec.acceptance, seed=3,
                                                    faults=faults)
    return AcceptanceRunner(spec, plan, tmp_path, collector, sku)


def _blocks(runner: AcceptanceRunner) -> dict[int, list[str]]:
    blocks: dict[int, list[str]] = {}
    for n in runner.plan.batch_nodes(1):
        blocks.setdefault(n.block, []).append(n.name)
    return blocks


class Refuses:
    def collect(self, *args: object) -> Path:
        raise AssertionError("a recorded stage must not be collected again")


def test_healthy_base_checks_and_smoke_record_outcomes_and_the_baseline(tmp_path):
    runner = _runner(tmp_path)
    blocks = _blocks(runner)
    base = runner.base_checks(blocks)
    assert [(o.stage, o.passed) for o in base] == [("storage", True), ("network", True)]
    nodes = [n for b in blocks.values() for n in b]
    smoke = runner.smoke(nodes)
    assert smoke.passed
    baseline = json.loads((tmp_path / "baselines" / "training.json").read_text())
    assert baseline["world_size"] == runner.spec.acceptance.smoke_nodes * runner.instance.gpus
    assert baseline["last_loss"] < baseline["first_loss"]
    network = runner.journal.state.acceptance["network"]
    assert network.pairs and (tmp_path / network.bundle / "manifest.json").is_file()
    resumed = _runner(tmp_path, collector=Refuses())
    assert [o.model_dump() for o in resumed.base_checks(blocks)] == [o.model_dump() for o in base]
    assert resumed.smoke(nodes) == smoke


def test_a_slow_file_system_halts_before_the_network_stage(tmp_path):
    runner = _runner(tmp_path, AcceptanceFaults(slow_storage=0.4))
    outcomes = runner.base_checks(_blocks(runner))
    assert [o.stage for o in outcomes] == ["storage"] and not outcomes[0].passed
    assert "storage-write-slow" in outcomes[0].reason_codes
    assert "network" not in runner.journal.state.acceptance


def test_a_bad_management_link_and_a_diverging_rank(tmp_path):
    probe = _runner(tmp_path / "probe")
    blocks = _blocks(probe)
    pairs = sample_pairs(blocks, probe.spec.acceptance.efa_pairs_per_block, seed=sum(map(len, blocks.values())))
    victim = pairs[0][1]
    nodes = [n for b in blocks.values() for n in b]
    runner = _runner(tmp_path / "run", AcceptanceFaults(bad_mgmt_nodes=frozenset({victim}), diverging_node=nodes[1]))
    storage_ok, network = runner.base_checks(blocks)
    assert storage_ok.passed and not network.passed and "mgmt-tcp-slow" in network.reason_codes
    assert any(victim in c.check_id for c in network.checks if c.verdict.blocks_admission)
    smoke = runner.smoke(nodes)
    assert not smoke.passed and smoke.reason_codes == ("smoke-ranks-diverged",)
    assert not (tmp_path / "run" / "baselines" / "training.json").exists()


def test_pairs_are_disjoint_inside_blocks_and_seeded():
    blocks = {0: [f"a{i}" for i in range(5)], 1: [f"b{i}" for i in range(2)]}
    pairs = sample_pairs(blocks, 2, seed=1)
    assert len(pairs) == 3 and pairs == sample_pairs(blocks, 2, seed=1)
    assert all(x[0] == y[0] for x, y in pairs)  # both ends in one block
    flat = [n for p in pairs for n in p]
    assert len(flat) == len(set(flat))


def test_smoke_needs_two_nodes(tmp_path):
    runner = _runner(tmp_path)
    outcome = runner.smoke(["only-one"])  # a failed, journaled stage (retryable), not an exception
    assert not outcome.passed and outcome.reason_codes == ("smoke-too-few-nodes",)
    assert runner.journal.state.acceptance["smoke"].status.value == "failed"
