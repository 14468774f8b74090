"""The live view of a rollout: per batch its stage, nodes done/total, admitted, quarantined, elapsed;
per acceptance stage running, passed with its key figures, or failed with its reason.

Why a journal listener: every change of the rollout is a journal event, so the view needs no hook
of its own in the orchestrator. On a terminal it is a rich table redrawn in place; otherwise (CI
logs, pipes) one plain line whenever a batch or an acceptance stage changes, so logs stay readable.
"""

from __future__ import annotations

import re
import sys
import threading
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


def batch_row(plan: ClusterPlan, state: RolloutState, number: int) -> dict[str, Any]:
    """One batch's row: its stage, nodes done/total, admitted, quarantines so far (they never go
    back after a replacement), replacements, and its own time (the seconds its stages took)."""
    b = plan.batches[number - 1]
    bs = state.batches.get(number)
    nodes = [state.nodes[s.name] for s in plan.batch_nodes(number) if s.name in state.nodes]
    live = [n.stage.value for n in nodes if n.stage not in DONE]
    stage = bs.stage.value if bs else "pending"
    if bs and bs.stage.value == "running" and live:
        stage = min(live, key=lambda v: list(NodeStage).index(NodeStage(v)))
    quarantines = sum(1 for n in nodes for h in n.history if h[0] == NodeStage.QUARANTINED.value)
    return {"batch": number, "canary": b.canary, "stage": stage, "done": sum(n.stage in DONE for n in nodes),
            "total": b.node_count, "admitted": sum(n.stage is NodeStage.ADMITTED for n in nodes),
            "quarantined": quarantines, "replaced": sum(n.replacements for n in nodes),
            "took": sum(bs.durations.values()) if bs else 0.0}


def batch_rows(plan: ClusterPlan, state: RolloutState, elapsed: Callable[[], float] | None = None
               ) -> list[dict[str, Any]]:
    """Every batch's row (a report's or a test's whole view; the live displays keep `RowCache`)."""
    return [batch_row(plan, state, b.number) for b in plan.batches]


class RowCache:
    """The batches' rows, recomputed only for the batch an event names.

    Why: recomputing every batch on every event costs events x batches; an event moves one batch
    (the rollout's and the acceptance stages' events move none of the rows' counts)."""

    def __init__(self, plan: ClusterPlan) -> None:
        self.plan = plan
        self.rows: dict[int, dict[str, Any]] = {}

    def update(self, event: Mapping[str, Any], state: RolloutState) -> int | None:
        k = event.get("batch")
        if not isinstance(k, int) or not 1 <= k <= len(self.plan.batches):
            return None
        self.rows[k] = batch_row(self.plan, state, k)
        return k

    def row(self, k: int) -> dict[str, Any]:
        b = self.plan.batches[k - 1]
        return self.rows.get(k) or {"batch": k, "canary": b.canary, "stage": "pending", "done": 0,
                                    "total": b.node_count, "admitted": 0, "quarantined": 0, "replaced": 0,
                                    "took": 0.0}


def _first(names: list[str], shown: int = 10) -> str:
    return ",".join(names[:shown]) + (f",+{len(names) - shown} more" if len(names) > shown else "") or "none"


def log_lines(event: Mapping[str, Any], state: RolloutState) -> list[str]:
    """One plain line per quarantine, replacement, capacity retry and halt (node, reason), as it
    happens, in `key=value` form a CI log reader can grep (`grep 'gpufleet: quarantine'`)."""
    kind, to, k = event.get("type"), event.get("to"), event.get("batch")
    nodes = event.get("nodes") or {}
    out = []
    if kind == "nodes" and to == "quarantined":
        for slot, d in nodes.items():
            d = d or {}
            out.append(f"gpufleet: quarantine node={slot} batch={k} code={d.get('reason_code')} "
                       f"reason={_quote(d.get('reason') or '')}")
    elif kind == "nodes" and to == "provisioned" and event.get("stage") == "replace":
        for slot, d in nodes.items():
            olds = [h[1] for h in state.nodes[slot].history if h[0] == NodeStage.PROVISIONED.value] \
                if slot in state.nodes else []
            old = olds[-2] if len(olds) > 1 else None
            out.append(f"gpufleet: replacement node={slot} batch={k} old={old} new={(d or {}).get('instance_id')}")
    elif kind == "nodes" and to == "provisioning":
        for slot, d in nodes.items():
            if (d or {}).get("shortfall"):
                out.append(f"gpufleet: capacity-retry node={slot} batch={k} reason={_quote(d['shortfall'])}")
    elif kind == "reconciled":
        for slot, d in nodes.items():
            if d.get("action") == "cleared-pending-create":
                out.append(f"gpufleet: reconcile node={slot} action=cleared-pending-create "
                           f"terminated={','.join(d.get('terminated') or ()) or 'none'}")
                continue
            out.append(f"gpufleet: reconcile node={slot} action={d.get('action')} journal={d.get('journal_instance')} "
                       f"provider={d.get('provider_instance')} pool={d.get('pool')}")
        if event.get("spares"):
            sp = event["spares"]
            out.append(f"gpufleet: reconcile spares journal={sp.get('journal')} provider={sp.get('provider')} "
                       f"used={sp.get('used')} budget={sp.get('budget')} "
                       f"slots={_first(sorted(sp.get('slots') or ()))}")
    elif to == "halted" and kind in ("batch", "rollout"):
        where = f"batch={k}" if kind == "batch" else "rollout"
        out.append(f"gpufleet: halt {where} reason={_quote(event.get('reason', ''))}")
    return out


# engine steps that change nothing (an unchanged resource, a read) say nothing a reader needs
QUIET_OPS = ("same", "read", "refresh")


def engine_line(step: Any) -> str | None:
    """One plain line per engine step of `pulumi up` (gpufleet.rollout.pulumi_provisioner's
    ProvisionProgress: urn, op, status, slot, message), or None for a step that changes nothing.

    Why here: the engine's events are the only word of what an update is doing for the minutes
    an instance takes; logged to a logger nobody configured, a long `up` looked hung."""
    if step.op in QUIET_OPS:
        return None
    what = f"node={step.slot}" if step.slot else f"resource={step.urn.rsplit('::', 1)[-1]}"
    line = f"gpufleet: pulumi {step.status} op={step.op} {what}"
    return line + (f" reason={_quote(step.message)}" if step.message else "")


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


class PlainDisplay:
    def __init__(self, plan: ClusterPlan, elapsed: Callable[[], float], out: TextIO = sys.stdout) -> None:
        self.plan, self.elapsed, self.out = plan, elapsed, out
        self.last: dict[int, tuple[str, int]] = {}
        self.cache = RowCache(plan)
        self._lock = threading.Lock()  # engine steps come from the provision-ahead worker's thread

    def engine(self, step: Any) -> None:
        """An engine step of `pulumi up` (see `engine_line`), as it happens."""
        line = engine_line(step)
        if line is not None:
            with self._lock:
                self.out.write(f"{line}  elapsed {_clock(self.elapsed())}\n")
                self.out.flush()

    def __call__(self, event: dict[str, Any], state: RolloutState) -> None:
        with self._lock:
            self._show(event, state)

    def _show(self, event: dict[str, Any], state: RolloutState) -> None:
        for line in log_lines(event, state):
            self.out.write(line + "\n")
        if event.get("type") == "acceptance":
            a = state.acceptance[event["stage"]]
            status = "FAILED" if a.status is StageStatus.FAILED else a.status.value
            self.out.write(f"{'acceptance ' + a.stage:<18} {status:<12} {stage_detail(a)}  "
                           f"elapsed {_clock(self.elapsed())}\n")
            self.out.flush()
            return
        k = self.cache.update(event, state)
        if k is not None:
            r = self.cache.row(k)
            key = (r["stage"], r["done"] == r["total"])
            if r["stage"] != "pending" and self.last.get(k) != key:
                self.last[k] = key
                self.out.write(_plain_row(r) + f"  elapsed {_clock(self.elapsed())}\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """A line about work that journals nothing yet (see AcceptanceHooks.note)."""
        with self._lock:
            self.out.write(f"{text}  elapsed {_clock(self.elapsed())}\n")
            self.out.flush()

    def close(self) -> None:
        pass


def _plain_row(r: Mapping[str, Any]) -> str:
    name = f"batch {r['batch']}{' (canary)' if r['canary'] else ''}"
    return (f"{name:<18} {r['stage']:<12} {r['done']:>5}/{r['total']:<5} admitted {r['admitted']:>5} "
            f"quarantined {r['quarantined']:>4} replaced {r['replaced']:>3}  took {_clock(r['took'])}")


ROWS = 45  # the terminal the live view must fit at any fleet size


def view_rows(cache: RowCache, budget: int) -> list[dict[str, Any]]:
    """The batch table's rows within `budget`: finished batches summed up in one row, pending ones
    in another, batches in flight one row each, and, where even those are too many, the in-flight
    batches furthest along summed up by stage so the ones behind stay visible."""
    rows = [cache.row(b.number) for b in cache.plan.batches]
    done = [r for r in rows if r["stage"] in ("passed", "halted")]
    pending = [r for r in rows if r["stage"] == "pending"]
    live = [r for r in rows if r not in done and r not in pending]
    out: list[dict[str, Any]] = []
    room = budget - bool(done) - bool(pending)
    if len(live) > room:
        order = list(NodeStage)
        live.sort(key=lambda r: (order.index(NodeStage(r["stage"])) if r["stage"] in NodeStage._value2member_map_
                                 else len(order), r["batch"]))
        shown, rest = live[:max(0, room - 1)], live[max(0, room - 1):]
        out += sorted(shown, key=lambda r: r["batch"])
        out.append(_sum_rows(rest, "in flight"))
    else:
        out += live
    if done:
        out.insert(0, _sum_rows(done, "finished"))
    if pending:
        out.append(_sum_rows(pending, "pending"))
    return out


def _sum_rows(rows: list[dict[str, Any]], what: str) -> dict[str, Any]:
    numbers = [r["batch"] for r in rows]
    stages = sorted({r["stage"] for r in rows})
    return {"batch": f"{len(rows)} {what}", "canary": False,
            "stage": ", ".join(stages) if len(stages) <= 2 else f"{len(stages)} stages",
            "done": sum(r["done"] for r in rows), "total": sum(r["total"] for r in rows),
            "admitted": sum(r["admitted"] for r in rows), "quarantined": sum(r["quarantined"] for r in rows),
            "replaced": sum(r["replaced"] for r in rows), "took": max((r["took"] for r in rows), default=0.0),
            "range": f"{min(numbers)}-{max(numbers)}"}


class RichDisplay:
    """A table redrawn at most a few times a second, never taller than ROWS lines; the plain log
    lines (quarantines, replacements, capacity retries, halts) print above it as they happen."""

    def __init__(self, plan: ClusterPlan, elapsed: Callable[[], float], stream: TextIO = sys.stdout) -> None:
        from rich.console import Console
        from rich.live import Live

        self.plan, self.elapsed = plan, elapsed
        self.cache = RowCache(plan)
        self.live = Live(console=Console(file=stream, force_terminal=True), refresh_per_second=4, transient=False)
        self.live.start()
        self._next = 0.0

    def __call__(self, event: dict[str, Any], state: RolloutState) -> None:
        from rich.text import Text

        self._state = state
        self.cache.update(event, state)
        for line in log_lines(event, state):
            self.live.console.print(Text(line))
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
            return self._batches(ROWS)
        t = Table(title="acceptance stages")
        for col in ("stage", "status", "figures / reason"):
            t.add_column(col)
        style = {"passed": "green", "failed": "bold red", "running": "yellow", "retry": "yellow",
                 "not-applicable": "dim"}
        for r in stages:  # Text, not markup: check ids hold brackets (net.tcp[a--b])
            t.add_row(r["stage"], Text(r["status"], style=style[r["status"]]), Text(r["detail"]))
        return Group(t, self._batches(ROWS - len(stages) - 5))

    def _batches(self, lines: int) -> Any:
        from rich.table import Table

        t = Table(title=f"gpufleet rollout  elapsed {_clock(self.elapsed())}")
        for col in ("batch", "stage", "done", "admitted", "quarantined", "replaced", "took"):
            t.add_column(col, justify="right" if col != "stage" else "left")
        for r in view_rows(self.cache, max(3, lines - 5)):  # title, header, three rules
            name = r.get("range") and f"{r['batch']} ({r['range']})" or f"{r['batch']}{'c' if r['canary'] else ''}"
            t.add_row(name, r["stage"], f"{r['done']}/{r['total']}", str(r["admitted"]), str(r["quarantined"]),
                      str(r["replaced"]), _clock(r["took"]))
        return t

    def note(self, text: str) -> None:
        """Printed above the live table, which keeps redrawing below it."""
        from rich.text import Text

        self.live.console.print(Text(f"{text}  elapsed {_clock(self.elapsed())}"))

    def engine(self, step: Any) -> None:
        """An engine step of `pulumi up`, printed above the table (rich's console locks its own writes)."""
        line = engine_line(step)
        if line is not None:
            self.note(line)

    def close(self) -> None:
        if getattr(self, "_state", None) is not None:
            self.live.update(self._table(self._state))  # the final state, whatever the throttle skipped
        self.live.stop()


def make_display(plan: ClusterPlan, elapsed: Callable[[], float], stream: TextIO = sys.stdout) -> Any:
    return RichDisplay(plan, elapsed, stream) if stream.isatty() else PlainDisplay(plan, elapsed, stream)
