"""The live view of a rollout: per batch its stage, nodes done/total, admitted, quarantined, elapsed.

Why a journal listener: every change of the rollout is a journal event, so the view needs no hook
of its own in the orchestrator. On a terminal it is a rich table redrawn in place; otherwise (CI
logs, pipes) one plain line whenever a batch changes stage, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, TextIO

from infra.plan.model import ClusterPlan
from infra.rollout.state import NodeStage, RolloutState

DONE = (NodeStage.ADMITTED, NodeStage.QUARANTINED)


def batch_rows(plan: ClusterPlan, state: RolloutState, elapsed: Callable[[], float]) -> list[dict[str, Any]]:
    rows = []
    for b in plan.batches:
        bs = state.batches.get(b.number)
        nodes = [state.nodes[s.name] for s in plan.batch_nodes(b.number) if s.name in state.nodes]
        live = [n.stage.value for n in nodes if n.stage not in DONE]
        stage = bs.stage.value if bs else "pending"
        if bs and bs.stage.value == "running" and live:
            stage = min(live, key=lambda v: list(NodeStage).index(NodeStage(v)))
        rows.append({"batch": b.number, "canary": b.canary, "stage": stage, "done": sum(n.stage in DONE for n in nodes),
                     "total": b.node_count, "admitted": sum(n.stage is NodeStage.ADMITTED for n in nodes),
                     "quarantined": sum(n.stage is NodeStage.QUARANTINED for n in nodes), "elapsed": elapsed()})
    return rows


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class PlainDisplay:
    def __init__(self, plan: ClusterPlan, elapsed: Callable[[], float], out: TextIO = sys.stdout) -> None:
        self.plan, self.elapsed, self.out = plan, elapsed, out
        self.last: dict[int, tuple[str, int]] = {}

    def __call__(self, _event: dict[str, Any], state: RolloutState) -> None:
        for r in batch_rows(self.plan, state, self.elapsed):
            key = (r["stage"], r["done"] == r["total"])
            if r["stage"] == "pending" or self.last.get(r["batch"]) == key:
                continue
            self.last[r["batch"]] = key
            name = f"batch {r['batch']}{' (canary)' if r['canary'] else ''}"
            self.out.write(f"{name:<18} {r['stage']:<12} {r['done']:>5}/{r['total']:<5} admitted {r['admitted']:>5} "
                           f"quarantined {r['quarantined']:>4}  elapsed {_clock(r['elapsed'])}\n")
            self.out.flush()

    def close(self) -> None:
        pass


class RichDisplay:
    """A table redrawn at most a few times a second."""

    def __init__(self, plan: ClusterPlan, elapsed: Callable[[], float], stream: TextIO = sys.stdout) -> None:
        from rich.console import Console
        from rich.live import Live

        self.plan, self.elapsed = plan, elapsed
        self.live = Live(console=Console(file=stream, force_terminal=True), refresh_per_second=4, transient=False)
        self.live.start()
        self._next = 0.0

    def __call__(self, _event: dict[str, Any], state: RolloutState) -> None:
        self._state = state
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 0.2
        self.live.update(self._table(state))

    def _table(self, state: RolloutState) -> Any:
        from rich.table import Table

        t = Table(title="gpufleet rollout")
        for col in ("batch", "stage", "done", "admitted", "quarantined", "elapsed"):
            t.add_column(col, justify="right" if col != "stage" else "left")
        for r in batch_rows(self.plan, state, self.elapsed):
            t.add_row(f"{r['batch']}{'c' if r['canary'] else ''}", r["stage"], f"{r['done']}/{r['total']}",
                      str(r["admitted"]), str(r["quarantined"]), _clock(r["elapsed"]))
        return t

    def close(self) -> None:
        if getattr(self, "_state", None) is not None:
            self.live.update(self._table(self._state))  # the final state, whatever the throttle skipped
        self.live.stop()


def make_display(plan: ClusterPlan, elapsed: Callable[[], float], stream: TextIO = sys.stdout) -> Any:
    return RichDisplay(plan, elapsed, stream) if stream.isatty() else PlainDisplay(plan, elapsed, stream)
