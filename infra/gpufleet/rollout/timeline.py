"""The modelled time-to-pool, from the seconds each port reported per batch and stage.

Why a model: on the simulator durations are modelled, and even on a real cloud the question "what
would pipelining save" needs both schedules from the same measured stage times. Pure.

A batch's path is its provisioning P, then everything after it (configure, preflight, remediation,
baselines, replacements) G. Sequential: batches back to back. Pipelined: batch k+1 is provisioned
while batch k is gated (from the end of k's configure), never while the canary runs (the canary
must pass before anything else is bought); k+1's configure starts when both its instances are up
and batch k is done (one orchestrator works batch by batch).

The stack-level acceptance stages (DESIGN.md section 6) sit on the critical path where the flow
puts them: the storage base check before the canary is provisioned (a shortfall halts before any
GPU node is bought: a Pulumi stack runs it on its own storage clients), the network base check on
the canary's hosts once they are configured, before their gates (it tests the nodes' own links
and EFA), and the training smoke job on the canary's admitted nodes before batch 2 is
provisioned (nothing after the canary is bought until it passes). So,
under either schedule, the base checks delay the canary's end, and all three every later batch. The lower bound is the storage
check, the canary's path with the network check and the smoke job, plus the longest other
batch's path: no schedule beats it with one canary first.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gpufleet.rollout.state import ACCEPTANCE_STAGES, RolloutState, StageStatus

PROVISION = "provision"
CONFIGURE = "configure"
STORAGE, NETWORK, SMOKE = ACCEPTANCE_STAGES


LATE = "late:"  # a duration key's prefix for work on the batch's own late track (retests, replacements)
FABRIC = "baseline"  # the stage that runs multi-node tests over the fabric


@dataclass(frozen=True)
class BatchTimes:
    number: int
    provision: float
    configure: float
    rest: float  # preflight, gates, baselines of the first instances (remediation and replacements: `late`)
    late: float = 0.0  # retests and replacements, on their own track after the batch's first pass
    fabric: float = 0.0  # the part of `rest` spent in multi-node tests (held to the fabric budget)

    @property
    def path(self) -> float:
        return self.provision + self.configure + self.rest + self.late

    @property
    def first_pass(self) -> float:
        return self.provision + self.configure + self.rest

    @classmethod
    def from_durations(cls, number: int, durations: Mapping[str, float]) -> "BatchTimes":
        late = sum(v for k, v in durations.items() if k.startswith(LATE))
        rest = sum(v for k, v in durations.items() if k not in (PROVISION, CONFIGURE) and not k.startswith(LATE))
        return cls(number, durations.get(PROVISION, 0.0), durations.get(CONFIGURE, 0.0), rest, late,
                   durations.get(FABRIC, 0.0))


@dataclass(frozen=True)
class StackStages:
    """The acceptance stages' seconds: 0 for a stage not run, not applicable, or on a stack without them."""

    storage: float = 0.0
    network: float = 0.0
    smoke: float = 0.0

    @property
    def total(self) -> float:
        return self.storage + self.network + self.smoke

    @classmethod
    def from_state(cls, state: RolloutState) -> "StackStages":
        """The seconds the journal gives each stage's decided attempt (one still running counts 0).

        An attempt that failed and was retried is not counted: time-to-pool is the flow's, and the
        time before an operator's retry is not a stage's."""
        seconds = {name: a.duration_s or 0.0 for name, a in state.acceptance.items()
                   if a.status in (StageStatus.PASSED, StageStatus.FAILED, StageStatus.NOT_APPLICABLE)}
        return cls(**{name: float(seconds.get(name, 0.0)) for name in ACCEPTANCE_STAGES})


@dataclass(frozen=True)
class Window:
    """The concurrency budget a windowed rollout ran under (gpufleet.plan.window.WindowBudget)."""

    batches: int  # post-canary batches in flight at once
    fabric_tests: int  # of them, multi-node tests at the same time
    fabric_physical: bool = True  # the fabric figure is the derived limit, not a chosen setting
    # the derived (physical) limit where a stack setting chose fewer fabric tests: bound (b) stays
    # the physical one, never the chosen figure (which would make the bound look close)
    fabric_limit: int | None = None

    @property
    def physical_fabric(self) -> int | None:
        """The fabric tests the fabric itself takes at once, where known (bound (b)'s divisor)."""
        return self.fabric_limit or (self.fabric_tests if self.fabric_physical else None)


@dataclass(frozen=True)
class Timeline:
    sequential_s: float
    pipelined_s: float
    lower_bound_s: float
    batch_end_s: tuple[float, ...]  # per batch, under the schedule the stack uses
    # acceptance stage -> (start, end) under the schedule the stack uses; stages that took no time are left out
    acceptance_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    windowed_s: float | None = None  # batches in flight together (None: the rollout ran one batch at a time)
    bound_paths_s: float = 0.0  # (a) acceptance + canary's path + the longest other batch's path
    bound_fabric_s: float | None = None  # (b) acceptance + canary + the fabric's total test work / its budget
    window: Window | None = None

    @property
    def modelled_s(self) -> float:
        """The time-to-pool under the schedule the rollout used."""
        return self.windowed_s if self.windowed_s is not None else self.pipelined_s

    @property
    def binds(self) -> str:
        """Which bound is the larger: (a) the paths, (b) the fabric budget."""
        return "b" if self.bound_fabric_s is not None and self.bound_fabric_s > self.bound_paths_s else "a"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "sequential_s": round(self.sequential_s, 1), "pipelined_s": round(self.pipelined_s, 1),
            "lower_bound_s": round(self.lower_bound_s, 1),
            "batch_end_s": [round(x, 1) for x in self.batch_end_s],
            "acceptance_s": {k: [round(a, 1), round(b, 1)] for k, (a, b) in self.acceptance_s.items()}}
        if self.windowed_s is not None and self.window is not None:
            out.update(windowed_s=round(self.windowed_s, 1), bound_paths_s=round(self.bound_paths_s, 1),
                       bound_fabric_s=None if self.bound_fabric_s is None else round(self.bound_fabric_s, 1),
                       binds=self.binds, window={"batches": self.window.batches,
                                                 "fabric_tests": self.window.fabric_tests,
                                                 "fabric_physical": self.window.fabric_physical,
                                                 **({"fabric_limit": self.window.fabric_limit}
                                                    if self.window.fabric_limit else {})})
        return out


@dataclass(frozen=True)
class _Schedule:
    batch_end: list[float]
    stages: dict[str, tuple[float, float]]

    @property
    def end(self) -> float:
        return max([*self.batch_end, *(e for _, e in self.stages.values())], default=0.0)


def _run(batches: Sequence[BatchTimes], pipelining: bool, stages: StackStages) -> _Schedule:
    spans: dict[str, tuple[float, float]] = {}

    def stage(name: str, at: float, seconds: float) -> float:
        if seconds:
            spans[name] = (at, at + seconds)
        return at + seconds

    ends: list[float] = []
    prev_end = stage(STORAGE, 0.0, stages.storage)
    prev_gate_start = prev_end
    for i, b in enumerate(batches):
        if pipelining and i >= 2:  # after the canary (index 0) and the first batch after it
            start_p = prev_gate_start
        else:
            start_p = prev_end
        end_p = start_p + b.provision
        start = max(end_p, prev_end)
        configured = start + b.configure
        if i == 0:  # on the canary's configured hosts, before its gates
            configured = stage(NETWORK, configured, stages.network)
        prev_gate_start = configured
        prev_end = configured + b.rest + b.late  # one batch at a time: its late track blocks the next
        ends.append(prev_end)
        if i == 0:
            prev_end = stage(SMOKE, prev_end, stages.smoke)
    if not batches:  # halted before the canary: the stages that ran, back to back
        stage(SMOKE, stage(NETWORK, prev_end, stages.network), stages.smoke)
    return _Schedule(ends, spans)


def _windowed(batches: Sequence[BatchTimes], stages: StackStages, window: Window) -> _Schedule:
    """Post-canary batches in flight together: the canary alone (its path, its replacements, the
    smoke job), then each batch starts as soon as fewer than `window.batches` others are in their
    first pass; its multi-node tests wait for one of `window.fabric_tests` fabric slots; its late
    track (retests, replacements) follows its first pass and holds neither a window nor a fabric slot.

    Why the late track starts at the first pass's end: a replacement's node is known at the latest
    there; starting it earlier would model a schedule the orchestrator does not promise."""
    seq = _run(batches[:1], False, stages)
    spans = dict(seq.stages)
    ends = list(seq.batch_end)
    t0 = seq.end
    in_flight: list[float] = []  # first-pass ends of batches holding a window slot
    fabric: list[float] = []  # ends of the multi-node tests holding a fabric slot
    for b in batches[1:]:
        start = t0
        if len(in_flight) >= window.batches:
            start = max(t0, heapq.heappop(in_flight))
        ready = start + b.first_pass - b.fabric
        if len(fabric) >= window.fabric_tests:
            ready = max(ready, heapq.heappop(fabric))
        first_end = ready + b.fabric
        if b.fabric:
            heapq.heappush(fabric, first_end)
        heapq.heappush(in_flight, first_end)
        ends.append(first_end + b.late)
    return _Schedule(ends, spans)


def elapsed(batches: Sequence[BatchTimes], pipelining: bool, stages: StackStages = StackStages(),
            window: Window | None = None) -> float:
    """The modelled time so far: the last batch's or acceptance stage's end."""
    if window is not None:
        return _windowed(batches, stages, window).end
    return _run(batches, pipelining, stages).end


def bounds(batches: Sequence[BatchTimes], stages: StackStages, window: Window | None) -> tuple[float, float | None]:
    """The lower bounds no schedule with one canary first beats: (a) the acceptance stages, the
    canary's path and the longest other batch's path; (b) where the fabric budget is a physical
    limit, the acceptance stages, the canary's path and every other batch's multi-node test time
    divided by the tests the fabric takes at once (None where there is no such limit)."""
    if not batches:
        return stages.total, None
    canary = stages.total + batches[0].path
    paths = canary + max((b.path for b in batches[1:]), default=0.0)
    limit = None if window is None else window.physical_fabric
    if limit is None:
        return paths, None
    return paths, canary + sum(b.fabric for b in batches[1:]) / limit


def timeline(batches: Sequence[BatchTimes], pipelining: bool, stages: StackStages = StackStages(),
             window: Window | None = None) -> Timeline:
    seq = _run(batches, False, stages)
    pipe = _run(batches, True, stages)
    paths, fabric = bounds(batches, stages, window)
    lower = max(paths, fabric or 0.0)
    used = pipe if pipelining else seq
    win = _windowed(batches, stages, window) if window is not None else None
    if win is not None:
        used = win
    return Timeline(sequential_s=seq.end, pipelined_s=pipe.end, lower_bound_s=lower,
                    batch_end_s=tuple(used.batch_end), acceptance_s=dict(used.stages),
                    windowed_s=None if win is None else win.end, bound_paths_s=paths, bound_fabric_s=fabric,
                    window=window)


def worked_batches(state: RolloutState) -> list[BatchTimes]:
    """The batches that have taken time, in order, with the seconds the journal gives their stages."""
    return [BatchTimes.from_durations(n, b.durations) for n, b in sorted(state.batches.items()) if b.durations]


def rollout_timeline(state: RolloutState, pipelining: bool, window: Window | None = None) -> Timeline:
    """The journal's rollout as a timeline: its worked batches and its acceptance stages."""
    return timeline(worked_batches(state), pipelining, StackStages.from_state(state), window)
