"""The acceptance stages as rollout steps: collect a bundle, check it, journal the verdict.

Why a runner apart from the orchestrator: the stages are stack-level (storage and network base
checks once per stack, before the first GPU batch or, on a real stack, network on the canary's
configured hosts; the training smoke job after the canary),
so each is one decision with its own bundle, not a node transition. Each attempt is journaled
as the rollout's own events (`gpufleet.rollout.state`, type `acceptance`): `started` before the
collection, the verdict (outcome, checks, reason codes, bundle, seconds) after it. A stage whose
verdict is journaled is never collected again, so a resumed rollout gets the same answer; one
started and not decided (a crash inside it) runs again, alone, into a fresh bundle folder
(`<state_dir>/acceptance/<stage>/<attempt>/`). A failing base check returns before any later
stage runs, so a shortfall halts the rollout before anything further is bought (where each check
runs on each kind of stack, and so what is bought before it: `AcceptanceHooks`; on a Pulumi stack
storage halts before any GPU node); a failed stage runs
again only after the operator journals a retry (`gpufleet rollout --retry-stage STAGE`). A
passing smoke job's figures become the stack's training baseline
(`<state_dir>/baselines/training.json`).

Before the stages were journaled, each outcome was a file, `<state_dir>/acceptance/<stage>.json`.
`adopt_recorded_files` converts such a file into the journal once (an `imported` verdict), when
it was written during this journal's rollout; a file older than the journal's start belongs to
an archived rollout (`--restart`) and is ignored.
"""

from __future__ import annotations

import json
import random
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from gpufleet.catalog import InstanceType
from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import read_bundle
from gpufleet.gates.verdict import CheckResult, Verdict, check_result
from gpufleet.plan.model import ClusterPlan
from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool.protocol import Launcher, LaunchResult, Pool
from gpufleet.durable import write_atomic
from gpufleet.rollout.smoke_stage import smoke_bundle, smoke_paths
from gpufleet.rollout.state import ACCEPTANCE_STAGES, BatchStage, RolloutState, StageStatus
from gpufleet.spec import ClusterSpec

STORAGE, NETWORK, SMOKE = ACCEPTANCE_STAGES
SMOKE_TOO_FEW_NODES = "smoke-too-few-nodes"


class AcceptanceCollector(Protocol):
    """Fills one stage's bundle folder (the simulator, a Slurm job, the preflight playbook)."""

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path: ...


class StorageClients(Protocol):
    """A real stack's storage clients (`gpufleet.rollout.storage_base.StorageClientsBase`)."""

    def prepare(self) -> list[str]:
        """Bring the clients up and configure them; their names."""
        ...


@runtime_checkable
class ModelledCollector(Protocol):
    """A collector whose stages take modelled time (the simulator): the runner journals its figure."""

    def seconds(self, stage: str) -> float: ...


class StageJournal(Protocol):
    """What the runner needs of the rollout's journal (`gpufleet.rollout.journal.Journal`)."""

    state: RolloutState

    def append(self, event: Mapping[str, Any]) -> dict[str, Any]: ...


def sample_pairs(blocks: Mapping[int, Sequence[str]], per_block: int, seed: int) -> list[tuple[str, str]]:
    """Up to `per_block` disjoint node pairs inside each block, seeded (the same on a resume).

    A block with a single node is paired across blocks (the management network and the EFA
    fabric span blocks, so a cross-block pair still proves that node's links): single-node blocks
    pair with each other, and an odd one out takes a node from the largest block first. Pairs stay
    disjoint (each node is one test's server or client), so an odd one out with no block of two
    to borrow from goes untested; only a single node has no pair at all.
    """
    rng = random.Random(seed)
    shuffled: dict[int, list[str]] = {}
    for block in sorted(blocks):  # one shuffle per block, in order: the same draws as before singles were paired
        nodes = list(blocks[block])
        rng.shuffle(nodes)
        shuffled[block] = nodes
    singles = [nodes[0] for nodes in shuffled.values() if len(nodes) == 1]
    cross: list[tuple[str, str]] = []
    donors = [b for b, nodes in shuffled.items() if len(nodes) >= 2]
    if len(singles) % 2 and donors:
        donor = max(donors, key=lambda b: len(shuffled[b]))  # the lowest such block on a tie
        cross.append((singles.pop(), shuffled[donor].pop()))
    cross += [(singles[2 * i], singles[2 * i + 1]) for i in range(len(singles) // 2)]
    pairs = [(nodes[2 * i], nodes[2 * i + 1]) for nodes in shuffled.values() if len(nodes) >= 2
             for i in range(min(per_block, len(nodes) // 2))]
    return pairs + cross


def _local_journal(state_dir: Path, stack: str) -> StageJournal:
    """The state dir's own journal, for a runner used outside a rollout (tools, tests)."""
    from gpufleet.rollout.journal import Journal, LocalJournalStore

    journal = Journal(LocalJournalStore(state_dir / "journal.jsonl"), stack)
    journal.load()
    return journal


class AcceptanceRunner:
    def __init__(self, spec: ClusterSpec, plan: ClusterPlan, state_dir: Path, collector: AcceptanceCollector,
                 instance: InstanceType, now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 journal: StageJournal | None = None, storage_client_mbs: int | None = None) -> None:
        """`storage_client_mbs`: one dedicated storage client's bandwidth (a Pulumi stack's client
        instances); None when the storage check runs on GPU nodes of `instance`."""
        self.spec, self.plan, self.collector, self.instance, self.now = spec, plan, collector, instance, now
        self.storage_client_mbs = storage_client_mbs
        self.state_dir = Path(state_dir)
        self.journal = journal if journal is not None else _local_journal(self.state_dir, spec.cluster.name)

    def recorded(self, stage: str) -> A.StageOutcome | None:
        """The stage's journaled verdict, or None when it has none (not run, running, or retried)."""
        a = self.journal.state.acceptance.get(stage)
        if a is None or not a.status.decided or a.outcome is None:
            return None
        return A.StageOutcome.model_validate(a.outcome)

    def legacy_path(self, stage: str) -> Path:
        return self.state_dir / "acceptance" / f"{stage}.json"

    def adopt_recorded_files(self) -> list[str]:
        """Journal the outcome files an older gpufleet wrote for this rollout (once); returns the stages."""
        state = self.journal.state
        adopted = []
        for stage in ACCEPTANCE_STAGES:
            path = self.legacy_path(stage)
            if stage in state.acceptance or not state.started or not path.is_file():
                continue
            doc = json.loads(path.read_text(encoding="utf-8"))
            if state.started_at is None or _instant(doc.get("at")) < _instant(state.started_at):
                continue  # written before this journal began: an archived rollout's outcome
            outcome = A.StageOutcome.model_validate(doc["outcome"])
            bundle = Path(doc.get("bundle", ""))
            self.journal.append({
                "type": "acceptance", "stage": stage, "to": "passed" if outcome.passed else "failed",
                "outcome": outcome.model_dump(mode="json"), "imported": str(path),
                "bundle": str(bundle.relative_to(self.state_dir)) if bundle.is_relative_to(self.state_dir)
                else str(bundle), "nodes": doc.get("nodes", []), "pairs": doc.get("pairs", [])})
            adopted.append(stage)
        return adopted

    def base_checks(self, blocks: Mapping[int, Sequence[str]]) -> list[A.StageOutcome]:
        """Storage from the first of these nodes, then network across them; stops at the first stage that fails."""
        done = [self.storage([n for b in sorted(blocks) for n in blocks[b]])]
        if done[0].passed:
            done.append(self.network(blocks))
        return done

    def storage(self, clients: Sequence[str]) -> A.StageOutcome:
        """The storage base check from the first `storageClients` of `clients` (a real stack's own
        client instances, else GPU hosts)."""
        return self._stage(STORAGE, list(clients)[: self.spec.acceptance.storage_clients], [])

    def network(self, blocks: Mapping[int, Sequence[str]]) -> A.StageOutcome:
        """The network base check over sampled pairs of these nodes, by block.

        With no node pair to test (one node) it is journaled not applicable: a verdict from no
        checks would be a pass with no evidence."""
        nodes = [n for b in sorted(blocks) for n in blocks[b]]
        pairs = sample_pairs(blocks, self.spec.acceptance.efa_pairs_per_block, seed=len(nodes))
        if not pairs:
            return self._not_applicable(NETWORK, nodes, f"{len(nodes)} node(s): no node pair to test")
        return self._stage(NETWORK, nodes, pairs)

    def smoke(self, nodes: Sequence[str]) -> A.StageOutcome:
        """The training smoke job on two to four admitted nodes of the canary batch.

        Fewer than two admitted nodes is a failed stage (`smoke-too-few-nodes`), journaled like
        any verdict, so the halt shows in the display and reports and `--retry-stage smoke` runs
        it again once replacements are admitted."""
        want = self.spec.acceptance.smoke_nodes
        if len(nodes) < 2 and self.recorded(SMOKE) is None:
            return self._too_few_nodes(list(nodes))
        return self._stage(SMOKE, list(nodes)[:want], [])

    def smoke_not_applicable(self, nodes: Sequence[str], reason: str) -> A.StageOutcome:
        """The smoke stage journaled not applicable (a pool with no launch of the smoke job)."""
        return self._not_applicable(SMOKE, nodes, reason)

    def _too_few_nodes(self, nodes: list[str]) -> A.StageOutcome:
        check = check_result("smoke.nodes", "Q", f"{len(nodes)} admitted canary node(s)", ">= 2 admitted canary nodes",
                             Verdict.QUARANTINE, SMOKE_TOO_FEW_NODES,
                             f"the training smoke job runs on 2 to 4 admitted canary nodes; {len(nodes)} admitted",
                             A.REF)
        outcome = A.stage_outcome(SMOKE, [check])
        self.journal.append({"type": "acceptance", "stage": SMOKE, "to": "started", "nodes": nodes, "pairs": []})
        self.journal.append({"type": "acceptance", "stage": SMOKE, "to": "failed",
                             "outcome": outcome.model_dump(mode="json"), "duration_s": 0.0, "timing": "measured"})
        return outcome

    def inputs(self, stage: str) -> dict[str, Any] | None:
        """What a stage's verdict holds for besides its nodes: the storage check's file system (as
        the stack asks for it and the plan sized it) and its bars; None for the other stages."""
        return storage_inputs(self.spec, self.plan) if stage == STORAGE else None

    def recheck_if_changed(self, stage: str) -> str | None:
        """Journal a recheck of a decided stage whose inputs changed since its verdict (the verdict is
        set aside, the stage runs again); the reason, or None when nothing changed. A verdict from
        before inputs were journaled is kept: there is nothing to compare it with."""
        a = self.journal.state.acceptance.get(stage)
        now = self.inputs(stage)
        if a is None or not a.status.decided or a.inputs is None or now is None or a.inputs == now:
            return None
        # the stack's own settings first (the cause), what the plan derived from them after
        changed = sorted((k for k in a.inputs.keys() | now.keys() if a.inputs.get(k) != now.get(k)),
                         key=lambda k: (k.startswith("plan."), k))
        what = ", ".join(f"{k} {a.inputs.get(k)} -> {now.get(k)}" for k in changed[:4])
        reason = f"{stage} changed since attempt {a.attempt}: {what}" + (" ..." if len(changed) > 4 else "")
        self.journal.append({"type": "acceptance", "stage": stage, "to": "recheck", "reason": reason[:500]})
        return reason

    def _not_applicable(self, stage: str, nodes: Sequence[str], reason: str) -> A.StageOutcome:
        done = self.recorded(stage)
        if done is not None:
            return done
        outcome = A.stage_outcome(stage, [])
        self.journal.append({"type": "acceptance", "stage": stage, "to": "not-applicable", "reason": reason,
                             "nodes": list(nodes), "outcome": outcome.model_dump(mode="json")})
        return outcome

    def _stage(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]]) -> A.StageOutcome:
        done = self.recorded(stage)
        if done is not None:
            return done
        previous = self.journal.state.acceptance.get(stage)
        if previous is not None and previous.status is StageStatus.RUNNING and previous.bundle:
            shutil.rmtree(self.state_dir / previous.bundle, ignore_errors=True)  # cut short: never checked
        attempt = previous.attempt + 1 if previous is not None else 1
        rel = Path("acceptance") / stage / str(attempt)
        dest = self.state_dir / rel
        if dest.exists():  # left by a journal that was never told (a crash before `started` was durable)
            shutil.rmtree(dest)
        started: dict[str, Any] = {"type": "acceptance", "stage": stage, "to": "started", "nodes": list(nodes),
                                   "pairs": [list(p) for p in pairs], "bundle": str(rel)}
        inputs = self.inputs(stage)
        if inputs is not None:
            started["inputs"] = inputs
        self.journal.append(started)
        began = self.now()
        folder = self.collector.collect(stage, nodes, pairs, dest)
        bundle = read_bundle(folder)
        outcome = A.stage_outcome(stage, self._checks(stage, bundle, nodes, pairs))
        if isinstance(self.collector, ModelledCollector):
            seconds, timing = self.collector.seconds(stage), "modelled"
        else:
            seconds, timing = max(0.0, (self.now() - began).total_seconds()), "measured"
        if stage == SMOKE and outcome.passed:
            baseline = A.training_baseline(bundle)
            if baseline is not None:
                path = self.state_dir / "baselines" / "training.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, json.dumps({"stack": self.spec.cluster.name, "at": self.now().isoformat(),
                                               "instance_type": self.instance.name, **baseline}, indent=2))
        self.journal.append({"type": "acceptance", "stage": stage, "to": "passed" if outcome.passed else "failed",
                             "outcome": outcome.model_dump(mode="json"), "duration_s": round(seconds, 1),
                             "timing": timing})
        return outcome

    def _checks(self, stage: str, bundle, nodes: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[CheckResult]:
        cfg = self.spec.acceptance
        if stage == STORAGE:  # judged for the clients that ran fio, at their own bandwidth
            return A.storage_checks(bundle, self.spec.storage, self.plan.storage, self.instance, cfg,
                                    clients=len(nodes) or None, per_client_mbs=self.storage_client_mbs)
        if stage == NETWORK:
            return A.network_checks(bundle, pairs, self.instance, cfg, efa=self.instance.efa_generation > 0)
        return A.smoke_checks(bundle, self.instance, cfg)


STORAGE_BARS = ("storage_clients", "storage_client_type", "storage_min_share", "random_read_min_iops",
                "random_read_p99_max_ms", "metadata_min_ops", "checkpoint_shards")


def storage_inputs(spec: ClusterSpec, plan: ClusterPlan) -> dict[str, Any]:
    """The storage check's inputs, flat and JSON-safe: the stack's `storage` section, the file
    system the plan sized from it, and the acceptance bars the check applies. A change in any of
    them (a resize, a new tier, a stricter floor) makes the journaled verdict one about another
    file system, so the stage runs again (`AcceptanceHooks.recheck`)."""
    out: dict[str, Any] = {f"storage.{k}": v for k, v in spec.storage.model_dump(mode="json", by_alias=True).items()}
    bars = spec.acceptance.model_dump(mode="json")
    aliases = spec.acceptance.model_dump(mode="json", by_alias=True)
    out |= {f"acceptance.{alias}": bars[k] for k, alias in zip(bars, aliases) if k in STORAGE_BARS}
    return out | {f"plan.storage.{k}": v for k, v in plan.storage.model_dump(mode="json").items()}


def _instant(stamp: object) -> datetime:
    """An ISO time stamp as an aware datetime (naive ones are UTC); a missing one sorts first."""
    if not isinstance(stamp, str):
        return datetime.min.replace(tzinfo=timezone.utc)
    t = datetime.fromisoformat(stamp)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


class LauncherSmokeCollector:
    """Runs the smoke job through the pool's launcher and keeps its output as the stage's bundle."""

    def __init__(self, launcher: Launcher, python: str, script: str, data_dir: str, ranks_per_node: int,
                 steps: int, timeout_s: float = 900, extra: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, container: A.SmokeContainer | None = None) -> None:
        self.launcher, self.python, self.script, self.data_dir = launcher, python, script, data_dir
        self.ranks_per_node, self.steps, self.timeout_s, self.extra = ranks_per_node, steps, timeout_s, tuple(extra)
        self.env, self.container = dict(env or {}), container

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        if stage != SMOKE:
            raise ValueError(f"the launcher collects the smoke stage only, not {stage!r}")
        spec = A.smoke_launch_spec(nodes, self.ranks_per_node, self.python, self.script, self.data_dir, self.steps,
                                   self.extra, env=self.env, container=self.container)
        result, = self.launcher.run([spec], self.timeout_s)
        return smoke_bundle(out, result, "launcher")


class PoolLauncher:
    """The pool's launcher, asked for at each launch: a real Slurm pool reaches its controller
    through the stack's outputs, which exist only once the first batch's update has run."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def run(self, specs: Sequence[LaunchSpec], timeout_s: float) -> list[LaunchResult]:
        return self.pool.launcher().run(specs, timeout_s)


class StageCollectors:
    """One collector per stage (a real stack: the acceptance playbook's base checks, the
    launcher's smoke job), as the one collector the runner takes."""

    def __init__(self, by_stage: Mapping[str, AcceptanceCollector]) -> None:
        self.by_stage = dict(by_stage)

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        collector = self.by_stage.get(stage)
        if collector is None:
            raise ValueError(f"no collector for acceptance stage {stage!r} (have {', '.join(self.by_stage)})")
        return collector.collect(stage, nodes, pairs, out)


def halt_reason(outcome: A.StageOutcome) -> str | None:
    """The rollout's halt reason for a failed stage (its reason codes and first messages), else None."""
    if outcome.passed:
        return None
    why = "; ".join(c.message for c in outcome.checks if c.verdict.blocks_admission and c.message)
    return f"acceptance {outcome.stage} failed ({', '.join(outcome.reason_codes)}): {why}"[:500]


class AcceptanceHooks:
    """The orchestrator's StageHooks over an AcceptanceRunner.

    Where the base checks run depends on the stack:
    - the simulator (`on_hosts` False): both before the first batch, on the first batch's planned
      slots by block (the simulator answers for them);
    - a real stack with storage clients (`storage_clients`, a Pulumi stack: its program creates
      them with the file system): storage before the first batch, on the clients, which
      `before_batches` first brings up and configures, so a shortfall halts before any GPU node
      is bought; network in `after_configure`, on the canary's configured hosts (it tests the
      nodes' own links and EFA), before their preflight and gates;
    - a real stack without clients (static hosts: nothing but the fleet exists): both in
      `after_configure` on the canary's configured hosts; a shortfall halts with the canary
      bought and nothing after it.
    The smoke job takes the canary's admitted nodes; `smoke_unavailable` (a pool with no launch
    of the job) journals it not applicable with that reason. Verdicts are journaled by the
    runner, so a resumed rollout that calls a hook again gets the journaled answer without
    collecting twice.
    """

    def __init__(self, runner: AcceptanceRunner, on_hosts: bool = False, smoke_unavailable: str | None = None,
                 storage_clients: StorageClients | None = None,
                 note: Callable[[str], None] = lambda _text: None) -> None:
        """`note`: where to say what runs before a stage is journaled (the rollout's display): bringing
        up the base and configuring the storage clients takes minutes and changes no journal state."""
        self.runner, self.on_hosts, self.smoke_unavailable = runner, on_hosts, smoke_unavailable
        self.storage_clients, self.note = storage_clients, note

    def before_batches(self) -> str | None:
        if not self.on_hosts:
            return self._base_checks(self._blocks(n.name for n in self.runner.plan.batch_nodes(1)))
        if self.storage_clients is None:
            return None
        return self._storage_on_clients()

    def after_configure(self, batch: int, slots: Sequence[str]) -> str | None:
        if not self.on_hosts or batch != 1:
            return None
        if self.storage_clients is None:
            return self._base_checks(self._blocks(slots))
        # journaled by before_batches, so read back; collected here only for a rollout whose canary
        # was bought before this gpufleet ran the check on clients
        reason = self._storage_on_clients()
        return reason if reason is not None else halt_reason(self.runner.network(self._blocks(slots)))

    def recheck(self) -> str | None:
        """The storage stage again, before anything else, when the rollout is past the point where
        `before_batches` runs it: its verdict was about another file system (the stack's storage
        section, the file system the plan sizes or the check's bars changed since: "after any
        storage change"), or the operator retried it, or a crash cut it short. A finished rollout
        reopens for it; a shortfall halts. The halt reason, or None."""
        state = self.runner.journal.state
        a = state.acceptance.get(STORAGE)
        if a is None:
            return None
        if a.status.decided:
            if self.runner.recheck_if_changed(STORAGE) is None:
                return None
        elif all(b.stage is BatchStage.PENDING for b in state.batches.values()):
            return None  # before the first batch: before_batches (or after_configure) runs it
        if self.storage_clients is not None:
            return self._storage_on_clients()  # the base's update applies the storage change first
        return halt_reason(self.runner.storage(a.nodes))

    def after_canary(self, admitted: Sequence[str]) -> str | None:
        if self.smoke_unavailable is not None:
            return halt_reason(self.runner.smoke_not_applicable(admitted, self.smoke_unavailable))
        return halt_reason(self.runner.smoke(admitted))

    def _storage_on_clients(self) -> str | None:
        """The journaled storage verdict, else the clients prepared and the stage run on them."""
        assert self.storage_clients is not None
        done = self.runner.recorded(STORAGE)
        if done is not None:
            return halt_reason(done)
        self.note("acceptance storage: bringing up the base (network, file system, storage clients; no GPU node) "
                  "and configuring the clients")
        clients = self.storage_clients.prepare()
        self.note(f"acceptance storage: {len(clients)} storage client(s) ready: {', '.join(clients[:4])}"
                  + (" ..." if len(clients) > 4 else ""))
        return halt_reason(self.runner.storage(clients))

    def _base_checks(self, blocks: Mapping[int, Sequence[str]]) -> str | None:
        for outcome in self.runner.base_checks(blocks):
            reason = halt_reason(outcome)
            if reason is not None:
                return reason
        return None

    def _blocks(self, slots: Iterable[str]) -> dict[int, list[str]]:
        block_of = {n.name: n.block for n in self.runner.plan.nodes}
        blocks: dict[int, list[str]] = {}
        for slot in slots:
            blocks.setdefault(block_of[slot], []).append(slot)
        return blocks


def smoke_container(spec: ClusterSpec, script: str) -> A.SmokeContainer | None:
    """The pinned workload image a real Slurm stack's smoke job runs in (pyxis, over the squashfs file
    role image_prepull wrote on every node); None without `acceptance.workloadImage` (the node's
    `smokePython` then). Bound at the same paths: the shared file system (the dataset's folder is
    created under it by the job, so the mount point itself, which always exists) and, read-only,
    the script's folder unless it lies on that file system."""
    a = spec.acceptance
    if a.workload_image is None:
        return None
    from gpufleet.gates.image import enroot_squashfs

    shared, scripts = Path(spec.storage.mount_path), Path(script).parent
    return A.SmokeContainer(image=enroot_squashfs(a.workload_image), mounts=(str(shared),),
                            read_only=() if scripts.is_relative_to(shared) else (str(scripts),),
                            python=a.smoke_image_python)


def stack_hooks(spec: ClusterSpec, plan: ClusterPlan, state_dir: Path, journal: StageJournal | None = None,
                wiring: Any | None = None) -> AcceptanceHooks | None:
    """The acceptance stages a stack's rollout runs.

    Their events go to `journal` (the rollout's own); outcome files an older gpufleet left for
    this rollout are converted into it first, so a rollout started before the stages were
    journaled resumes, and reports, what they decided.

    A simulated stack runs the simulator's collector. A real stack runs them over its adapters
    (`wiring`, an `gpufleet.rollout.wiring.Wiring`): storage and network through `wiring.acceptance`
    (acceptance.yml over the stack's executor), storage on `wiring.storage_clients` before the
    first batch when the stack has them, network on the canary's configured hosts, the smoke job
    through the pool's launcher (srun; on a Kubernetes pool an Indexed Job in the workload image,
    journaled not applicable when the stack names none). None for a real stack without wiring
    (nothing to run them on).
    """
    from gpufleet import catalog

    sku = catalog.get(spec.cluster.instance_type)
    if spec.simulated and spec.simulator is not None:
        from gpufleet.sim.acceptance import SimAcceptanceCollector, faults_from

        collector: AcceptanceCollector = SimAcceptanceCollector(spec.storage, plan.storage, sku, spec.acceptance,
                                                                seed=spec.simulator.seed,
                                                                faults=faults_from(spec.simulator.acceptance))
        if spec.pool.type == "slurm" and wiring is not None:  # local-slurm: the smoke job through srun
            from gpufleet.sim.srun_relay import SrunRelayLauncher, SrunSmokeCollector

            relay = wiring.adapters.pool.launcher()
            if isinstance(relay, SrunRelayLauncher):
                collector = SrunSmokeCollector(collector, relay)
        on_hosts, smoke_unavailable, clients = False, None, None
    elif wiring is not None and wiring.acceptance is not None:
        pool = wiring.adapters.pool
        collectors: dict[str, AcceptanceCollector] = {STORAGE: wiring.acceptance, NETWORK: wiring.acceptance}
        smoke_unavailable = None
        if pool.kind == "slurm":
            script, data_dir = smoke_paths(spec)
            collectors[SMOKE] = LauncherSmokeCollector(PoolLauncher(pool), spec.acceptance.smoke_python, script,
                                                       data_dir, ranks_per_node=sku.gpus,
                                                       steps=spec.acceptance.smoke_steps,
                                                       container=smoke_container(spec, script))
        elif pool.kind == "kubernetes":  # an Indexed Job of torchrun pods in the workload image
            from gpufleet.project import current_project
            from gpufleet.rollout import kubernetes_smoke as ks

            smoke_unavailable = ks.unavailable(spec)
            if smoke_unavailable is None:
                collectors[SMOKE] = ks.KubernetesSmokeCollector(pool, spec, sku,
                                                                lambda: ks.project_script(current_project()))
        else:
            smoke_unavailable = f"the {pool.kind} pool has no launch of the smoke job"
        collector, on_hosts = StageCollectors(collectors), True
        clients = wiring.storage_clients
    else:
        return None
    client_mbs = None
    if clients is not None:
        from gpufleet.plan.storage_clients import client_type_mbs

        client_mbs = client_type_mbs(spec.acceptance.storage_client_type)
    runner = AcceptanceRunner(spec, plan, state_dir, collector, sku, journal=journal, storage_client_mbs=client_mbs)
    runner.adopt_recorded_files()
    return AcceptanceHooks(runner, on_hosts=on_hosts, smoke_unavailable=smoke_unavailable, storage_clients=clients)
