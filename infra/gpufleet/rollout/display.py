"""The live view of a rollout: per batch its stage, nodes done/total, admitted, quarantined, elapsed;
per acceptance stage running, passed with its key figures, or failed with its reason.

Why a journal listener: every change of the rollout is a journal event, so the view needs no hook
of its own in the orchestrator. On a terminal it is a rich table redrawn in place; otherwise (CI
logs, pipes) one plain line whenever a batch or an acceptance stage changes, so logs stay readable.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any, Callable, Mapping, Sequence, TextIO

from gpufleet.gates.verdict import Verdict
from gpufleet.plan.model import ClusterPlan
from gpufleet.rollout.state import ACCEPTANCE_STAGES, AcceptanceState, NodeStage, RolloutState, StageStatus

DONE = (NodeStage.ADMITTED, NodeStage.QUARANTINED)
# The checks whose measured values sum a stage up; a stage not named here (the network, one
# check family per pair) is summed up per family as the range of its figures over the pairs.
KEY_CHECKS = {"storage": ("storage.seq-write", "storage.seq-read", "storage.checkpoint"),
              "smoke": ("smoke.loss", "smoke.throughput")}
_FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([A-Za-z][\w/%]*)")


def key_figures(stage: str, checks: Sequence[Mapping[str, Any]]) -> str:
    """A stage's figures in one line, from its journaled checks (`check_id`, `measured`)."""
    keys = KEY_CHECKS.get(stage)
    if keys is not None:
        by_id = {c["check_id"]: c["measured"] for c in checks}
        return "; ".join(f"{k.split('.', 1)[1]} {by_id[k]}" for k in keys if k in by_id)
    families: dict[str, list[tuple[float, str]]] = {}
    for c in checks:
        m = _FIGURE.search(str(c["measured"]))
        if m is not None:
            families.setdefault(c["check_id"].split("[", 1)[0], []).append((float(m[1]), m[2]))
    parts = []
    for family, figures in families.items():
        lo, hi, unit = min(f for f, _ in figures), max(f for f, _ in figures), figures[0][1]
        span = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
        parts.append(f"{family.split('.', 1)[-1]} {span} {unit}")
    pairs = {c["check_id"].split("[", 1)[1].rstrip("]") for c in checks if "[" in c["check_id"]}
    return "; ".join(parts) + (f" over {len(pairs)} pairs" if pairs else "")


def failure_text(checks: Sequence[Mapping[str, Any]], reason_codes: Sequence[str]) -> str:
    """Why a stage failed: its reason codes and its first blocking check's message."""
    blocking = [c for c in checks if Verdict(c["verdict"]).blocks_admission]
    first = next((c.get("message") or c["check_id"] for c in blocking), "")
    more = f" (+{len(blocking) - 1} more failing checks)" if len(blocking) > 1 else ""
    return f"{', '.join(reason_codes)}: {first}{more}"


def stage_detail(a: AcceptanceState) -> str:
    """What the display and the summary say of one acceptance stage after its status."""
    if a.status is StageStatus.RUNNING:
        return f"attempt {a.attempt} on {len(a.nodes)} nodes" + (f", {len(a.pairs)} pairs" if a.pairs else "")
    if a.status is StageStatus.NOT_APPLICABLE:
        return f"nothing to test ({a.reason})"
    if a.status is StageStatus.RETRY:
        if a.failures[-1].get("recheck"):
            return f"to run again ({a.failures[-1]['recheck']})"
        return f"to run again (attempt {a.attempt} failed: {', '.join(a.failures[-1]['reason_codes'])})"
    checks = (a.outcome or {}).get("checks", ())
    text = key_figures(a.stage, checks) if a.status is StageStatus.PASSED else failure_text(checks, a.reason_codes)
    took = f" ({a.duration_s:.0f} s {a.timing})" if a.duration_s is not None else ""
    return text + took


def acceptance_rows(state: RolloutState) -> list[dict[str, str]]:
    """The acceptance stages the journal has heard of, in the order a rollout runs them."""
    return [{"stage": name, "status": state.acceptance[name].status.value,
             "detail": stage_detail(state.acceptance[name])} for name in ACCEPTANCE_STAGES if name in state.acceptance]


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

    def __call__(self, event: dict[str, Any], state: RolloutState) -> None:
        if event.get("type") == "acceptance":
            a = state.acceptance[event["stage"]]
            status = "FAILED" if a.status is StageStatus.FAILED else a.status.value
            self.out.write(f"{'acceptance ' + a.stage:<18} {status:<12} {stage_detail(a)}  "
                           f"elapsed {_clock(self.elapsed())}\n")
            self.out.flush()
            return
        for r in batch_rows(self.plan, state, self.elapsed):
            key = (r["stage"], r["done"] == r["total"])
            if r["stage"] == "pending" or self.last.get(r["batch"]) == key:
                continue
            self.last[r["batch"]] = key
            name = f"batch {r['batch']}{' (canary)' if r['canary'] else ''}"
            self.out.write(f"{name:<18} {r['stage']:<12} {r['done']:>5}/{r['total']:<5} admitted {r['admitted']:>5} "
                           f"quarantined {r['quarantined']:>4}  elapsed {_clock(r['elapsed'])}\n")
            self.out.flush()

    def note(self, text: str) -> None:
        """A line about work that journals nothing yet (see AcceptanceHooks.note)."""
        self.out.write(f"{text}  elapsed {_clock(self.elapsed())}\n")
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
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        stages = acceptance_rows(state)
        if not stages:
            return self._batches(state)
        t = Table(title="acceptance stages")
        for col in ("stage", "status", "figures / reason"):
            t.add_column(col)
        style = {"passed": "green", "failed": "bold red", "running": "yellow", "retry": "yellow",
                 "not-applicable": "dim"}
        for r in stages:  # Text, not markup: check ids hold brackets (net.tcp[a--b])
            t.add_row(r["stage"], Text(r["status"], style=style[r["status"]]), Text(r["detail"]))
        return Group(t, self._batches(state))

    def _batches(self, state: RolloutState) -> Any:
        from rich.table import Table

        t = Table(title="gpufleet rollout")
        for col in ("batch", "stage", "done", "admitted", "quarantined", "elapsed"):
            t.add_column(col, justify="right" if col != "stage" else "left")
        for r in batch_rows(self.plan, state, self.elapsed):
            t.add_row(f"{r['batch']}{'c' if r['canary'] else ''}", r["stage"], f"{r['done']}/{r['total']}",
                      str(r["admitted"]), str(r["quarantined"]), _clock(r["elapsed"]))
        return t

    def note(self, text: str) -> None:
        """Printed above the live table, which keeps redrawing below it."""
        from rich.text import Text

        self.live.console.print(Text(f"{text}  elapsed {_clock(self.elapsed())}"))

    def close(self) -> None:
        if getattr(self, "_state", None) is not None:
            self.live.update(self._table(self._state))  # the final state, whatever the throttle skipped
        self.live.stop()


def make_display(plan: ClusterPlan, elapsed: Callable[[], float], stream: TextIO = sys.stdout) -> Any:
    return RichDisplay(plan, elapsed, stream) if stream.isatty() else PlainDisplay(plan, elapsed, stream)
