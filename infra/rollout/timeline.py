"""The modelled time-to-pool, from the seconds each port reported per batch and stage.

Why a model: on the simulator durations are modelled, and even on a real cloud the question "what
would pipelining save" needs both schedules from the same measured stage times. Pure.

A batch's path is its provisioning P, then everything after it (configure, preflight, remediation,
baselines, replacements) G. Sequential: batches back to back. Pipelined: batch k+1 is provisioned
while batch k is gated (from the end of k's configure), never while the canary runs (the canary
must pass before anything else is bought); k+1's configure starts when both its instances are up
and batch k is done (one orchestrator works batch by batch). The lower bound is the canary's path
plus the longest other batch's path: no schedule beats it with one canary first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

PROVISION = "provision"
CONFIGURE = "configure"


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
class Timeline:
    sequential_s: float
    pipelined_s: float
    lower_bound_s: float
    batch_end_s: tuple[float, ...]  # per batch, under the schedule the stack uses

    def to_dict(self) -> dict[str, object]:
        return {"sequential_s": round(self.sequential_s, 1), "pipelined_s": round(self.pipelined_s, 1),
                "lower_bound_s": round(self.lower_bound_s, 1),
                "batch_end_s": [round(x, 1) for x in self.batch_end_s]}


def schedule(batches: Sequence[BatchTimes], pipelining: bool) -> list[float]:
    """End time of each batch."""
    ends: list[float] = []
    prev_end = 0.0
    prev_gate_start = 0.0
    for i, b in enumerate(batches):
        if pipelining and i >= 2:  # after the canary (index 0) and the first batch after it
            start_p = prev_gate_start
        else:
            start_p = prev_end
        end_p = start_p + b.provision
        start = max(end_p, prev_end)
        prev_gate_start = start + b.configure
        prev_end = start + b.configure + b.rest
        ends.append(prev_end)
    return ends


def timeline(batches: Sequence[BatchTimes], pipelining: bool) -> Timeline:
    seq = schedule(batches, False)
    pipe = schedule(batches, True)
    lower = (batches[0].path + max((b.path for b in batches[1:]), default=0.0)) if batches else 0.0
    return Timeline(sequential_s=seq[-1] if seq else 0.0, pipelined_s=pipe[-1] if pipe else 0.0,
                    lower_bound_s=lower, batch_end_s=tuple(pipe if pipelining else seq))
