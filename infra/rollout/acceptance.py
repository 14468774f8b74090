"""The acceptance stages as rollout steps: collect a bundle, check it, record the outcome.

Why a runner apart from the orchestrator: the stages are stack-level (storage and network base
checks once per stack before the first GPU batch, the training smoke job after the canary),
so each is one decision with its own bundle, not a node transition. A recorded outcome
(`<state_dir>/acceptance/<stage>.json`, written atomically) is never re-collected: a resumed
rollout reads it, so a crash between stages repeats at most the stage that was running. A
failing base check returns before any later stage runs, so a shortfall halts the rollout before
a GPU node is bought. A passing smoke job's figures become the stack's training baseline
(`<state_dir>/baselines/training.json`).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from infra.catalog import InstanceType
from infra.gates import acceptance as A
from infra.gates.bundle import FileRecord, Manifest, read_bundle, write_bundle
from infra.gates.verdict import CheckResult
from infra.plan.model import ClusterPlan
from infra.pool.protocol import Launcher
from infra.durable import write_atomic
from infra.spec import ClusterSpec

STORAGE, NETWORK, SMOKE = "storage", "network", "smoke"
BASE_STAGES = (STORAGE, NETWORK)


class AcceptanceCollector(Protocol):
    """Fills one stage's bundle folder (the simulator, a Slurm job, the preflight playbook)."""

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path: ...


def sample_pairs(blocks: Mapping[int, Sequence[str]], per_block: int, seed: int) -> list[tuple[str, str]]:
    """Up to `per_block` disjoint node pairs inside each block, seeded (the same on a resume)."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    for block in sorted(blocks):
        nodes = list(blocks[block])
        rng.shuffle(nodes)
        pairs += [(nodes[2 * i], nodes[2 * i + 1]) for i in range(min(per_block, len(nodes) // 2))]
    return pairs


class AcceptanceRunner:
    def __init__(self, spec: ClusterSpec, plan: ClusterPlan, state_dir: Path, collector: AcceptanceCollector,
                 instance: InstanceType, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.spec, self.plan, self.collector, self.instance, self.now = spec, plan, collector, instance, now
        self.state_dir = Path(state_dir)

    def record_path(self, stage: str) -> Path:
        return self.state_dir / "acceptance" / f"{stage}.json"

    def recorded(self, stage: str) -> A.StageOutcome | None:
        path = self.record_path(stage)
        if not path.is_file():
            return None
        return A.StageOutcome.model_validate(json.loads(path.read_text(encoding="utf-8"))["outcome"])

    def base_checks(self, blocks: Mapping[int, Sequence[str]]) -> list[A.StageOutcome]:
        """Storage, then network; stops at the first stage that fails."""
        done: list[A.StageOutcome] = []
        for stage in BASE_STAGES:
            nodes = [n for b in sorted(blocks) for n in blocks[b]]
            pairs = sample_pairs(blocks, self.spec.acceptance.efa_pairs_per_block, seed=len(nodes))
            outcome = self._stage(stage, nodes[: self.spec.acceptance.storage_clients] if stage == STORAGE else nodes,
                                  pairs if stage == NETWORK else [])
            done.append(outcome)
            if not outcome.passed:
                break
        return done

    def smoke(self, nodes: Sequence[str]) -> A.StageOutcome:
        """The training smoke job on two to four admitted nodes of the canary batch."""
        want = self.spec.acceptance.smoke_nodes
        if len(nodes) < 2:
            raise ValueError(f"the smoke job needs at least 2 admitted nodes, got {len(nodes)}")
        return self._stage(SMOKE, list(nodes)[:want], [])

    def _stage(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]]) -> A.StageOutcome:
        done = self.recorded(stage)
        if done is not None:
            return done
        folder = self.collector.collect(stage, nodes, pairs, self.state_dir / "acceptance" / "bundles" / stage)
        bundle = read_bundle(folder)
        outcome = A.stage_outcome(stage, self._checks(stage, bundle, pairs))
        if stage == SMOKE and outcome.passed:
            baseline = A.training_baseline(bundle)
            if baseline is not None:
                path = self.state_dir / "baselines" / "training.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, json.dumps({"stack": self.spec.cluster.name, "at": self.now().isoformat(),
                                               "instance_type": self.instance.name, **baseline}, indent=2))
        path = self.record_path(stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"stage": stage, "at": self.now().isoformat(), "bundle": str(folder),
                                       "nodes": list(nodes), "pairs": [list(p) for p in pairs],
                                       "outcome": outcome.model_dump(mode="json")}, indent=2))
        return outcome

    def _checks(self, stage: str, bundle, pairs: Sequence[tuple[str, str]]) -> list[CheckResult]:
        cfg = self.spec.acceptance
        if stage == STORAGE:
            return A.storage_checks(bundle, self.spec.storage, self.plan.storage, self.instance, cfg)
        if stage == NETWORK:
            return A.network_checks(bundle, pairs, self.instance, cfg, efa=self.instance.efa_generation > 0)
        return A.smoke_checks(bundle, self.instance, cfg)


class LauncherSmokeCollector:
    """Runs the smoke job through the pool's launcher and keeps its output as the stage's bundle."""

    def __init__(self, launcher: Launcher, python: str, script: str, data_dir: str, ranks_per_node: int,
                 steps: int, timeout_s: float = 900, extra: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.launcher, self.python, self.script, self.data_dir = launcher, python, script, data_dir
        self.ranks_per_node, self.steps, self.timeout_s, self.extra = ranks_per_node, steps, timeout_s, tuple(extra)
        self.env = dict(env or {})

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        if stage != SMOKE:
            raise ValueError(f"the launcher collects the smoke stage only, not {stage!r}")
        spec = A.smoke_launch_spec(nodes, self.ranks_per_node, self.python, self.script, self.data_dir, self.steps,
                                   self.extra, env=self.env)
        result, = self.launcher.run([spec], self.timeout_s)
        record = FileRecord(command=result.command, exit_code=result.exit_code, started=result.started,
                            ended=result.ended)
        return write_bundle(out, {A.TRAIN_SMOKE: result.output},
                            Manifest(slot="acceptance-smoke", collected_by="launcher", files={A.TRAIN_SMOKE: record}))


def halt_reason(outcome: A.StageOutcome) -> str | None:
    """The rollout's halt reason for a failed stage (its reason codes and first messages), else None."""
    if outcome.passed:
        return None
    why = "; ".join(c.message for c in outcome.checks if c.verdict.blocks_admission and c.message)
    return f"acceptance {outcome.stage} failed ({', '.join(outcome.reason_codes)}): {why}"[:500]


class AcceptanceHooks:
    """The orchestrator's StageHooks over an AcceptanceRunner.

    The base checks sample pairs among the first batch's planned slots, by block (on a cloud
    those are the first hosts up; the simulator answers for them); the smoke job takes the
    canary's admitted nodes. Outcomes are recorded by the runner, so a resumed rollout that
    calls a hook again gets the recorded answer without collecting twice.
    """

    def __init__(self, runner: AcceptanceRunner) -> None:
        self.runner = runner

    def before_batches(self) -> str | None:
        blocks: dict[int, list[str]] = {}
        for node in self.runner.plan.batch_nodes(1):
            blocks.setdefault(node.block, []).append(node.name)
        for outcome in self.runner.base_checks(blocks):
            reason = halt_reason(outcome)
            if reason is not None:
                return reason
        return None

    def after_canary(self, admitted: Sequence[str]) -> str | None:
        if len(admitted) < 2:
            return f"acceptance smoke: needs 2 admitted canary nodes, {len(admitted)} admitted"
        return halt_reason(self.runner.smoke(admitted))


def stack_hooks(spec: ClusterSpec, plan: ClusterPlan, state_dir: Path) -> AcceptanceHooks | None:
    """The acceptance stages a stack's rollout runs: the simulator's on a simulated stack.

    None on a real stack for now: its storage and network bundles need a collector on the
    first hosts (fio/iperf3/fabtests over srun or SSH), which is not built yet; the smoke job's
    collector (LauncherSmokeCollector) is, and needs the pool's launcher.
    """
    if not spec.simulated or spec.simulator is None:
        return None
    from infra import catalog
    from infra.sim.acceptance import SimAcceptanceCollector

    sku = catalog.get(spec.cluster.instance_type)
    collector = SimAcceptanceCollector(spec.storage, plan.storage, sku, spec.acceptance, seed=spec.simulator.seed)
    return AcceptanceHooks(AcceptanceRunner(spec, plan, state_dir, collector, sku))
