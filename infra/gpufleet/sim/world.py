"""The simulated cloud's durable state under `<state_dir>/sim/`: the ledger, remediations, the
captured program.

Why a ledger apart from the rollout journal: crash-safety tests compare what the *cloud* did
(every instance launched, stopped, or refused for capacity) with an uninterrupted run, so the
cloud must keep its own record, fsync'd before an answer leaves it. The instances are a fold over
the ledger (never a second copy that could disagree), so a process killed anywhere resumes with
exactly what was launched. Remediations live in one small JSON replaced atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from gpufleet.durable import fsync_dir, write_atomic

LEDGER = "ledger.jsonl"
REMEDIES = "remedies.json"
PROGRAM = "program.json"
FAULTS = "faults.json"  # the seeded truth this cloud was created with (and its digest)


@dataclass(frozen=True)
class SimInstance:
    """One launched instance and where it stands."""

    slot: str
    instance_id: str
    private_ip: str
    batch: int
    block: int
    generation: int  # 0: the slot's first instance; each replacement or reimage adds one
    state: str = "running"  # running | stopped | terminated
    ami: str | None = None  # the image it booted (None: launched before the simulator kept images)
    # its replacement-generation tag (gpufleet.tagging.GENERATION): 0 first, +1 per replacement, a
    # reimage keeps it; unlike `generation` (this slot's n-th launch, which picks its seeded fault)
    tag_generation: int = 0


class Ledger:
    """Append-only JSONL of what the simulated cloud did; one fsync'd line per effect.

    Events: `launch` (slot, instance_id, private_ip, batch, block, generation, ami, tag_generation,
    by: provision|replace|reimage), `stop` / `terminate` (slot, instance_id), `shortfall` (slot,
    batch). A reimage is a `terminate` of the slot's instance and a `launch` from the new image. A
    torn last line (a kill mid-write) is cut off on open: that effect never reached anyone.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._instances: dict[str, SimInstance] = {}  # the fold, kept up to date event by event
        self._current: dict[str, SimInstance] = {}
        self._shortfalls: dict[str, int] = {}
        self._replacements = 0
        self._relaunches = 0  # replacements and reimages: each took a fresh address
        self._generation: dict[str, int] = {}  # slot -> its newest instance's generation
        self._image: dict[str, str | None] = {}  # slot -> the image its newest instance booted
        self._tag: dict[str, int] = {}  # slot -> its newest instance's replacement-generation tag
        self._recover()

    def _recover(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                break
            self._fold(event)
            good += len(line)
        if good != len(data):
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())

    def _fold(self, e: dict[str, Any]) -> None:
        self.events.append(e)
        kind = e["event"]
        if kind == "launch":
            inst = SimInstance(e["slot"], e["instance_id"], e["private_ip"], e["batch"], e["block"], e["generation"],
                               ami=e.get("ami"), tag_generation=int(e.get("tag_generation") or 0))
            self._instances[inst.instance_id] = inst
            self._current[inst.slot] = inst
            self._replacements += e["by"] == "replace"
            self._relaunches += e["by"] in ("replace", "reimage")
            self._image[inst.slot] = inst.ami
            self._generation[inst.slot] = max(self._generation.get(inst.slot, -1), inst.generation)
            self._tag[inst.slot] = inst.tag_generation
        elif kind in ("stop", "terminate"):
            old = self._instances[e["instance_id"]]
            self._instances[old.instance_id] = replace(old, state="stopped" if kind == "stop" else "terminated")
            if self._current.get(old.slot) == old:
                del self._current[old.slot]
        elif kind == "shortfall":
            self._shortfalls[e["slot"]] = self._shortfalls.get(e["slot"], 0) + 1
        else:
            raise ValueError(f"{self.path}: unknown ledger event {kind!r}")

    def append(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Write the events, then fsync: only then may the caller answer."""
        rows = [{"seq": len(self.events) + i, **e} for i, e in enumerate(events)]
        if not rows:
            return
        new = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:
            fsync_dir(self.path.parent)
        for r in rows:
            self._fold(r)

    # ---- the fold
    def instances(self) -> dict[str, SimInstance]:
        """Every instance ever launched, by id, with its current state."""
        return dict(self._instances)

    def instance(self, instance_id: str) -> SimInstance | None:
        return self._instances.get(instance_id)

    def current(self) -> dict[str, SimInstance]:
        """slot -> its running instance."""
        return dict(self._current)

    def shortfalls(self, slot: str) -> int:
        return self._shortfalls.get(slot, 0)

    def newest_generation(self, slot: str) -> int | None:
        """The generation of the slot's newest instance; None when the slot never had one."""
        return self._generation.get(slot)

    def newest_tag(self, slot: str) -> int | None:
        """The replacement-generation tag of the slot's newest instance; None when it never had one."""
        return self._tag.get(slot)

    def replacements(self) -> int:
        return self._replacements

    def relaunches(self) -> int:
        """Instances launched into a slot that had one before (replacements and reimages)."""
        return self._relaunches

    def image(self, slot: str) -> str | None:
        """The image of the slot's newest instance (what a replacement boots again)."""
        return self._image.get(slot)

    def launches(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "launch"]


class Remedies:
    """instance id -> remediations applied (reset-gpu, reboot), kept in one atomically replaced file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.applied: dict[str, list[str]] = json.loads(path.read_text()) if path.exists() else {}

    def of(self, instance_id: str) -> tuple[str, ...]:
        return tuple(self.applied.get(instance_id, ()))

    def add(self, instance_id: str, action: str) -> None:
        done = self.applied.setdefault(instance_id, [])
        if action in done:
            return  # idempotent: a repeated remediation changes nothing more
        done.append(action)
        write_atomic(self.path, json.dumps(self.applied, sort_keys=True, indent=1))


def read_json(path: Path) -> Any:
    """A state file written by write_atomic; None when absent or unreadable (never half-written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # absent, or damaged by hand: never trusted
        return None


def cache_key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def read_program_cache(path: Path, key: str) -> dict[str, dict[str, str]] | None:
    """The captured instances (slot -> {instance_id, private_ip}) when cached for this exact key."""
    doc = read_json(path)  # absent or damaged: captured again
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("instances"), dict):
        return None
    return doc["instances"]


def write_program_cache(path: Path, key: str, instances: Mapping[str, Mapping[str, str]]) -> None:
    write_atomic(path, json.dumps({"key": key, "instances": instances}, sort_keys=True))
