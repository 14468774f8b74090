"""The simulator's pool: one JSON file under the stack's state dir, with the Slurm/Kubernetes semantics.

Why a file: a simulated rollout is interrupted and resumed like a real one, and `gpufleet pool -s
local` reads the pool another process left. Every change is written atomically (temp file, fsync,
rename, fsync of the folder) under an exclusive lock, so a crash leaves the old or the new pool,
never half of one. Running work is the scheduler's side of the file: a node's `busy` flag, and
the work's name under `work` (slot -> name) where whoever placed it gave one; the pool keeps both
as it finds them and names the work when a drain is held (`holders`). The launcher is injected:
the fabric model of `gpufleet.sim` in the `local` stack, a small fake in tests. So can `work`, a
scheduler's live view (admitted slots -> slot -> job): the simulator's job stream on a stack that
sets `gpufleet:simulator.jobStream` (`gpufleet.sim.jobs_pool`); its nodes read busy besides the file's.
The pool tells it of drains (an admitted node registered pending: its job runs on, as under Slurm's
DRAIN) and of nodes leaving work (quarantine, blacklist, release), when it has those hooks.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

from gpufleet.durable import write_atomic
from gpufleet.masking import mask
from gpufleet.errors import PoolError
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.pool import transitions
from gpufleet.pool.protocol import Holder, Launcher, NodeState, PendingNode, PoolNode, PoolState

POOL_FILE = "pool.json"
FORMAT_VERSION = 1


class SimPool:
    """Pool port over `<state dir>/pool.json`.

    `slots` and `partitions` are the plan's slot and partition names: a call naming any other is
    refused, as Slurm refuses a node missing from slurm.conf (None: accept any name).
    """

    kind = "sim"

    def __init__(self, path: Path, launcher: Launcher | None, *, failures_before_blacklist: int = 2,
                 slots: Collection[str] | None = None, partitions: Collection[str] | None = None) -> None:
        self.path = Path(path)
        self._launcher = launcher
        self.failures_before_blacklist = failures_before_blacklist
        self.slots = frozenset(slots) if slots is not None else None
        self.partitions = frozenset(partitions) if partitions is not None else None
        self._cache: tuple[tuple[int, int, int], dict[str, Any]] | None = None
        self._fragments: dict[str, tuple[dict[str, Any], str]] = {}
        self.work: Callable[[Iterable[str]], Mapping[str, str]] | None = None

    # --- the port -------------------------------------------------------------------------

    def register_pending(self, nodes: Sequence[PendingNode]) -> None:
        drained: list[str] = []  # admitted nodes taken out of new work: their running work runs on
        with self._edit() as doc:
            staged: dict[str, PoolNode] = {}
            for node in nodes:  # validate every node first: all or nothing
                # a node the pool already has is known even once the plan drops it (a shrink drains it)
                if self.slots is not None and node.slot not in self.slots and node.slot not in doc["nodes"]:
                    raise PoolError("no such slot in this stack's plan", node=node.slot)
                if self.partitions is not None and node.partition is not None and node.partition not in self.partitions:
                    raise PoolError(f"partition {node.partition!r} is not in this pool "
                                    f"(it has {', '.join(sorted(self.partitions)) or 'none'})", node=node.slot)
                now = staged.get(node.slot) or _node(doc["nodes"].get(node.slot))
                carried = doc["released"].get(node.slot, 0)
                staged[node.slot] = transitions.register(now, node, carried)
            for slot, new in staged.items():
                if (doc["nodes"].get(slot) or {}).get("state") == NodeState.ADMITTED.value:
                    drained.append(slot)
                doc["nodes"][slot] = _dump(new)
                doc["released"].pop(slot, None)
        self._tell("drain", drained)

    def admit(self, slot: str, record: AdmissionRecord) -> PoolNode:
        return self._apply(slot, lambda now: transitions.admit(now, slot, record))

    def admit_many(self, items: Sequence[tuple[str, AdmissionRecord]]) -> list[PoolNode]:
        """`admit` for many slots in one write: all validated first, none applied if one is refused."""
        with self._edit() as doc:
            results = []
            for slot, record in items:
                now = _node(doc["nodes"].get(slot))
                new = transitions.admit(now, slot, record)
                results.append(new)
                if new != now:
                    doc["nodes"][slot] = _dump(new)
            return results

    def quarantine(self, slot: str, reason_code: str, reason: str) -> PoolNode:
        self._tell("leave", [slot])
        return self._apply(slot, lambda now: transitions.quarantine(now, slot, reason_code, reason,
                                                                    self.failures_before_blacklist))

    def blacklist(self, slot: str, reason: str) -> PoolNode:
        self._tell("leave", [slot])
        return self._apply(slot, lambda now: transitions.blacklist(now, slot, reason), allow_released=True)

    def clear(self, slot: str) -> PoolNode:
        with self._edit() as doc:
            if slot in doc["released"]:  # the slot has no instance: forget its failures only
                doc["released"][slot] = 0
                return PoolNode(slot=slot, state=NodeState.PENDING, failures=0)
            new = transitions.clear(_node(doc["nodes"].get(slot)), slot)
            doc["nodes"][slot] = _dump(new)
            return new

    def release(self, slot: str) -> None:
        self._tell("leave", [slot])
        with self._edit() as doc:
            if slot in doc["released"]:
                return
            now = _node(doc["nodes"].get(slot))
            new = transitions.release(now, slot)
            if new is None:
                del doc["nodes"][slot]
                doc["released"][slot] = now.failures
            else:
                doc["nodes"][slot] = _dump(new)

    def end_work(self, slots: Sequence[str]) -> list[str]:
        """The scheduler's side: the work on `slots` is cancelled (`gpufleet destroy --cancel-jobs`).
        Returns the slots that were busy; idempotent."""
        with self._edit() as doc:
            ended = []
            for slot in slots:
                raw = doc["nodes"].get(slot)
                if raw is not None and raw.get("busy"):
                    doc["nodes"][slot] = {**raw, "busy": False}
                    ended.append(slot)
                doc["work"].pop(slot, None)
            return ended

    def state(self) -> PoolState:
        doc = self._read()
        nodes = {slot: _node(raw) for slot, raw in sorted(doc["nodes"].items())}
        for slot in self._live(nodes):
            nodes[slot] = replace(nodes[slot], busy=True)
        return PoolState(nodes=nodes)

    def holders(self, slots: Sequence[str]) -> list[Holder]:
        """The named work on the busy ones of `slots`; a busy node whose work has no name is left out
        (the drain then reports the slot itself)."""
        doc = self._read()
        live = self._live({slot: _node(raw) for slot, raw in doc["nodes"].items()})
        return [Holder(slot=slot, workload=doc["work"][slot]) if doc["work"].get(slot) else
                Holder(slot=slot, workload=live[slot]) for slot in slots
                if (doc["nodes"].get(slot, {}).get("busy") and doc["work"].get(slot)) or slot in live]

    def _live(self, nodes: Mapping[str, PoolNode | None]) -> Mapping[str, str]:
        """The injected scheduler's jobs on the admitted nodes, and on the pending ones it still runs
        work on (drained while a job held them: the job runs on); none without `work`."""
        if self.work is None:
            return {}
        admitted = {s for s, n in nodes.items() if n is not None and n.state is NodeState.ADMITTED}
        pending = {s for s, n in nodes.items() if n is not None and n.state is NodeState.PENDING}
        return {s: j for s, j in self.work(sorted(admitted)).items() if s in admitted or s in pending}

    def _tell(self, what: str, slots: Sequence[str]) -> None:
        """Let the injected scheduler know slots were drained (`drain`) or left the pool's work (`leave`)."""
        hook = getattr(self.work, what, None)
        if hook is not None and slots:
            hook(slots)

    def launcher(self) -> Launcher:
        if self._launcher is None:
            raise PoolError("this simulated pool was opened without a launcher (status only); "
                            "the rollout injects the simulator's fabric model")
        return self._launcher

    # --- the file -------------------------------------------------------------------------

    def _apply(self, slot: str, step: Any, allow_released: bool = False) -> PoolNode:
        with self._edit() as doc:
            now = _node(doc["nodes"].get(slot))
            if now is None and allow_released and slot in doc["released"]:
                now = PoolNode(slot=slot, state=NodeState.PENDING, failures=doc["released"][slot])
            new = step(now)
            if new != now:
                doc["nodes"][slot] = _dump(new)
                doc["released"].pop(slot, None)
            return new

    def _read(self) -> dict[str, Any]:
        """The pool document: a fresh top level over node entries that are never changed in place
        (an edit replaces an entry), so the parse is cached while the file is the one we last saw."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return {"version": FORMAT_VERSION, "nodes": {}, "released": {}, "work": {}}
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._cache is not None and self._cache[0] == key:
            doc = self._cache[1]
        else:
            doc = self._parse()
            self._cache = (key, doc)
        return {"version": doc["version"], "nodes": dict(doc["nodes"]), "released": dict(doc["released"]),
                "work": dict(doc["work"])}

    def _parse(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"version": FORMAT_VERSION, "nodes": {}, "released": {}, "work": {}}
        except OSError as exc:
            raise PoolError(f"cannot read the simulated pool {self.path}: {exc.strerror}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PoolError(f"{self.path} is not valid JSON ({exc.msg} at line {exc.lineno}); "
                            "it is gpufleet's simulated pool: delete it to start empty") from None
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            raise PoolError(f"{self.path}: not a version-{FORMAT_VERSION} simulated pool file")
        doc.setdefault("nodes", {})
        doc.setdefault("released", {})
        doc.setdefault("work", {})
        if not isinstance(doc["work"], dict) or not all(isinstance(v, str) for v in doc["work"].values()):
            raise PoolError(f"{self.path}: `work` must map slots to the names of the work running there")
        return doc

    @contextmanager
    def _edit(self) -> Iterator[dict[str, Any]]:
        """Read, let the caller change, write atomically; an exception writes nothing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            doc = self._read()
            before = {"nodes": dict(doc["nodes"]), "released": dict(doc["released"])}
            yield doc
            if doc["nodes"] != before["nodes"] or doc["released"] != before["released"]:
                write_atomic(self.path, self._render(doc))
                st = os.stat(self.path)
                self._cache = ((st.st_ino, st.st_mtime_ns, st.st_size), doc)


    def _render(self, doc: dict[str, Any]) -> str:
        """The document as compact, key-sorted JSON. Node entries are replaced, never changed in
        place, so each one's text is kept and only changed entries are encoded again: one admit
        of 1,250 nodes encodes one node, not all of them."""
        parts = []
        for slot in sorted(doc["nodes"]):
            raw = doc["nodes"][slot]
            known = self._fragments.get(slot)
            if known is None or known[0] is not raw:
                known = (raw, f"{json.dumps(slot)}:{json.dumps(raw, sort_keys=True, separators=(',', ':'))}")
                self._fragments[slot] = known
            parts.append(known[1])
        released = json.dumps(doc["released"], sort_keys=True, separators=(",", ":"))
        work = f',"work":{json.dumps(doc["work"], sort_keys=True, separators=(",", ":"))}' if doc["work"] else ""
        return f'{{"nodes":{{{",".join(parts)}}},"released":{released},"version":{doc["version"]}{work}}}'


def _dump(node: PoolNode) -> dict[str, Any]:
    raw = asdict(node)
    raw["state"] = node.state.value
    return mask(raw)  # a --reason or an alert's text may quote a secret


def _node(raw: dict[str, Any] | None) -> PoolNode | None:
    if raw is None:
        return None
    return PoolNode(**{**raw, "state": NodeState(raw["state"])})
