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

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gpufleet.rollout.state import ACCEPTANCE_STAGES, RolloutState, StageStatus

PROVISION = "provision"
CONFIGURE = "configure"
STORAGE, NETWORK, SMOKE = ACCEPTANCE_STAGES


@dataclass(frozen=True)
class BatchTimes:
    number: int
    provision: float
    configure: float
    rest: float  # preflight, gates, remediation, baselines, replacements

    @property
    def path(self) -> float:
        return self.provision + self.configure + self.rest

    @classmethod
    def from_durations(cls, number: int, durations: Mapping[str, float]) -> "BatchTimes":
        rest = sum(v for k, v in durations.items() if k not in (PROVISION, CONFIGURE))
        return cls(number, durations.get(PROVISION, 0.0), durations.get(CONFIGURE, 0.0), rest)


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
class Timeline:
    sequential_s: float
    pipelined_s: float
    lower_bound_s: float
    batch_end_s: tuple[float, ...]  # per batch, under the schedule the stack uses
    # acceptance stage -> (start, end) under the schedule the stack uses; stages that took no time are left out
    acceptance_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"sequential_s": round(self.sequential_s, 1), "pipelined_s": round(self.pipelined_s, 1),
                "lower_bound_s": round(self.lower_bound_s, 1),
                "batch_end_s": [round(x, 1) for x in self.batch_end_s],
                "acceptance_s": {k: [round(a, 1), round(b, 1)] for k, (a, b) in self.acceptance_s.items()}}


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
        prev_end = configured + b.rest
        ends.append(prev_end)
        if i == 0:
            prev_end = stage(SMOKE, prev_end, stages.smoke)
    if not batches:  # halted before the canary: the stages that ran, back to back
        stage(SMOKE, stage(NETWORK, prev_end, stages.network), stages.smoke)
    return _Schedule(ends, spans)


def elapsed(batches: Sequence[BatchTimes], pipelining: bool, stages: StackStages = StackStages()) -> float:
    """The modelled time so far: the last batch's or acceptance stage's end."""
    return _run(batches, pipelining, stages).end


def timeline(batches: Sequence[BatchTimes], pipelining: bool, stages: StackStages = StackStages()) -> Timeline:
    seq = _run(batches, False, stages)
    pipe = _run(batches, True, stages)
    lower = stages.total + ((batches[0].path + max((b.path for b in batches[1:]), default=0.0)) if batches else 0.0)
    used = pipe if pipelining else seq
    return Timeline(sequential_s=seq.end, pipelined_s=pipe.end, lower_bound_s=lower,
                    batch_end_s=tuple(used.batch_end), acceptance_s=dict(used.stages))


def worked_batches(state: RolloutState) -> list[BatchTimes]:
    """The batches that have taken time, in order, with the seconds the journal gives their stages."""
    return [BatchTimes.from_durations(n, b.durations) for n, b in sorted(state.batches.items()) if b.durations]


def rollout_timeline(state: RolloutState, pipelining: bool) -> Timeline:
    """The journal's rollout as a timeline: its worked batches and its acceptance stages."""
    return timeline(worked_batches(state), pipelining, StackStages.from_state(state))
