"""Faults that appear on a running simulated node after its admission (for the patrol).

Why apart from the seeded fault plan: the seed decides what each instance arrives with; a fault
that develops later (an Xid in the kernel log of an idle, admitted node) is told to the simulator
at a moment of its virtual clock, by slot. `instance_id` binds it to one instance (a GPU that went
bad: a replacement is healthy); without it the fault stays with the slot (a bad rack position:
every instance there shows it). Kept in `<state_dir>/sim/late-faults.json`, replaced atomically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Mapping

from gpufleet.errors import ConfigError
from gpufleet.sim.faults import EFFECTS
from gpufleet.sim.world import SimInstance, read_json, write_atomic

LATE_FILE = "late-faults.json"


@dataclass(frozen=True)
class LateFault:
    kind: str
    since: datetime  # virtual time it appeared (its kernel log lines carry this time)
    instance_id: str | None = None

    def applies_to(self, inst: SimInstance) -> bool:
        return self.instance_id is None or self.instance_id == inst.instance_id


class LateFaults:
    def __init__(self, path: Path) -> None:
        self.path = path
        raw = read_json(path)
        self.faults: dict[str, LateFault] = {}
        if isinstance(raw, dict):
            for slot, f in raw.items():
                self.faults[slot] = LateFault(f["kind"], datetime.fromisoformat(f["since"]), f.get("instance_id"))

    def of(self, inst: SimInstance) -> LateFault | None:
        f = self.faults.get(inst.slot)
        return f if f is not None and f.applies_to(inst) else None

    def add(self, slot: str, kind: str, since: datetime, instance_id: str | None = None) -> None:
        if kind not in EFFECTS or EFFECTS[kind].stage != "preflight":
            raise ConfigError(f"{kind!r} is not a fault a running node can develop", field="kind",
                              expected="one of " + ", ".join(sorted(k for k, e in EFFECTS.items()
                                                                    if e.stage == "preflight")))
        self.faults[slot] = LateFault(kind, since, instance_id)
        self._save()

    def clear(self, slot: str) -> None:
        if self.faults.pop(slot, None) is not None:
            self._save()

    def _save(self) -> None:
        doc: Mapping[str, dict] = {s: {"kind": f.kind, "since": f.since.isoformat(), "instance_id": f.instance_id}
                                   for s, f in sorted(self.faults.items())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(doc, indent=1, sort_keys=True))
