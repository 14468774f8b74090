"""The performance layer's decisions: the latest baselines per node, block and scale vs their history.

A snapshot is what the stack's stored baselines say at one time: per node the intra-node all-reduce
busbw of its admission record, per block the median of its admitted nodes' pair busbw (the
multi-node runs with known-good partners), per scale the median busbw of the multi-node runs over
that many nodes (`baselines/communication.json`). The history is the snapshots earlier drift runs
recorded. A figure regresses when it is more than `fraction` below the median of its last
`window` historical values; the median, so one odd run in the history neither hides nor invents a
regression. Pure: the adapter reads records and history and appends the snapshot.
"""

from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.reports.drift import BlockHistory, Finding, Layer, Severity

PERF_SNAPSHOT_SCHEMA_VERSION = 1
REGRESSION = "baseline-regression"
RING_PREFIX = "ring:"  # multi_node_gbs keys of ring runs; the others name a partner node
DEFAULT_WINDOW = 5


class PerfSnapshot(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = PERF_SNAPSHOT_SCHEMA_VERSION
    taken_at: datetime  # when the baselines it holds were measured (the latest decision)
    nodes: dict[str, float] = Field(default_factory=dict)  # slot -> intra-node busbw GB/s
    blocks: dict[str, float] = Field(default_factory=dict)  # block -> median pair busbw GB/s
    scales: dict[str, float] = Field(default_factory=dict)  # node count -> median multi-node busbw GB/s

    def metrics(self) -> dict[tuple[str, str], float]:
        return {**{("node", k): v for k, v in self.nodes.items()}, **{("block", k): v for k, v in self.blocks.items()},
                **{("scale", k): v for k, v in self.scales.items()}}


def snapshot(records: Sequence[Mapping[str, Any]], communication: Mapping[str, Any] | None) -> PerfSnapshot | None:
    """The snapshot of the admitted nodes' records and the communication baseline; None when
    nothing was measured yet."""
    admitted = [r for r in records if r.get("action") == "admit"]
    nodes = {r["slot"]: float(r["busbw"]["intra_node_gbs"]) for r in admitted
             if (r.get("busbw") or {}).get("intra_node_gbs") is not None}
    pairs: dict[str, list[float]] = {}
    for r in admitted:
        if r.get("block") is None:
            continue
        values = [float(v) for k, v in ((r.get("busbw") or {}).get("multi_node_gbs") or {}).items()
                  if not k.startswith(RING_PREFIX)]
        pairs.setdefault(str(r["block"]), []).extend(values)
    blocks = {b: round(statistics.median(vs), 2) for b, vs in pairs.items() if vs}
    scales = {k: float(v["median_gbs"]) for k, v in ((communication or {}).get("scales") or {}).items()
              if v.get("median_gbs") is not None}
    times = [datetime.fromisoformat(str(r["decided_at"])) for r in admitted if r.get("decided_at")]
    if communication and communication.get("updated_at"):
        times.append(datetime.fromisoformat(str(communication["updated_at"])))
    if not (nodes or blocks or scales) or not times:
        return None
    return PerfSnapshot(taken_at=max(times), nodes=nodes, blocks=blocks, scales=scales)


def is_new(current: PerfSnapshot, history: Sequence[PerfSnapshot]) -> bool:
    """A snapshot is recorded once: a drift run over unchanged baselines adds nothing to the history."""
    return all(h.taken_at != current.taken_at for h in history)


_LABEL = {"node": "node {}", "block": "block {}", "scale": "{} nodes"}
_WHAT = {"node": "intra-node busbw", "block": "median pair busbw", "scale": "median multi-node busbw"}


def regressions(current: PerfSnapshot, history: Sequence[PerfSnapshot], fraction: float,
                window: int = DEFAULT_WINDOW) -> list[Finding]:
    """Figures of `current` more than `fraction` below the median of their last `window` values in
    `history` (oldest first; `current` itself left out if it was already recorded)."""
    past = [h for h in sorted(history, key=lambda h: h.taken_at) if h.taken_at < current.taken_at]
    series: dict[tuple[str, str], list[float]] = {}
    for h in past:
        for key, v in h.metrics().items():
            series.setdefault(key, []).append(v)
    out = []
    for key, value in sorted(current.metrics().items()):
        values = series.get(key, [])[-window:]
        if not values:
            continue
        reference = statistics.median(values)
        if reference <= 0 or value >= reference * (1 - fraction):
            continue
        kind, name = key
        drop = 1 - value / reference
        out.append(Finding(
            layer=Layer.PERFORMANCE, check=REGRESSION, subject=_LABEL[kind].format(name), field=_WHAT[kind],
            expected=f">= {reference * (1 - fraction):.2f} GB/s", found=f"{value:.2f} GB/s",
            severity=Severity.HIGH if kind != "node" else Severity.MEDIUM,
            message=f"{_WHAT[kind]} of {_LABEL[kind].format(name)} is {value:.2f} GB/s, {drop:.1%} below the median "
                    f"{reference:.2f} GB/s of its last {len(values)} run(s) (threshold {fraction:.0%})"))
    return out


def block_history(current: PerfSnapshot, history: Sequence[PerfSnapshot], regressed: Sequence[str],
                  window: int = DEFAULT_WINDOW) -> BlockHistory:
    """The runs compared (the last `window` earlier snapshots and the current one) as block series."""
    runs = [h for h in sorted(history, key=lambda h: h.taken_at) if h.taken_at < current.taken_at][-window:]
    runs.append(current)
    return BlockHistory(
        runs=[r.taken_at.strftime("%Y-%m-%d %H:%M") for r in runs],
        median_of_blocks=[round(statistics.median(r.blocks.values()), 2) if r.blocks else None for r in runs],
        regressed={b: [r.blocks.get(b) for r in runs] for b in regressed})
