"""What each simulated instance was configured with, and software versions that slow NCCL down.

Why: a grey upgrade changes nodes group by group, so "the BOM's versions" is no longer one answer
for the fleet: each instance reports what its last `configure` installed (the stack's BOM for a
rollout, the upgrade's target or the recorded previous BOM for an upgrade or a rollback). An
instance never configured through this record reports the cloud's BOM, as before.

`SimImages` is what each image (AMI) carries: the BOM it was built from. An AMI is immutable, so
its first registration stands; a reimaged instance boots with that BOM's versions installed
before any configure runs (a rollback by reimage boots the previous image's versions).

`VersionFaults` is the simulator's knob for a bad release: a component version (e.g. an NCCL whose
ring algorithm regressed) multiplies the bandwidth of every node running it, so the upgrade's
comparison with the group's previous baselines has something real to catch. Both live under
`<state_dir>/sim/` and are replaced atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from gpufleet.sim.world import read_json, write_atomic

INSTALLED_FILE = "installed.json"
IMAGES_FILE = "images.json"
VERSION_FAULTS_FILE = "version-faults.json"


class Installed:
    def __init__(self, path: Path) -> None:
        self.path = path
        raw = read_json(path)
        self.by_instance: dict[str, dict] = raw if isinstance(raw, dict) else {}

    def versions(self, instance_id: str) -> dict[str, str] | None:
        entry = self.by_instance.get(instance_id)
        return dict(entry["versions"]) if entry else None

    def digest(self, instance_id: str) -> str | None:
        entry = self.by_instance.get(instance_id)
        return entry["bom_digest"] if entry else None

    def record(self, instance_ids: list[str], bom_digest: str, versions: Mapping[str, str]) -> None:
        changed = False
        for iid in instance_ids:
            entry = {"bom_digest": bom_digest, "versions": dict(sorted(versions.items()))}
            if self.by_instance.get(iid) != entry:
                self.by_instance[iid] = entry
                changed = True
        if changed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(self.by_instance, sort_keys=True))


class SimImages:
    """AMI id -> {bom_digest, versions}: the simulated image catalogue."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw = read_json(path)
        self.by_ami: dict[str, dict] = raw if isinstance(raw, dict) else {}

    def of(self, ami: str) -> dict | None:
        entry = self.by_ami.get(ami)
        return {"bom_digest": entry["bom_digest"], "versions": dict(entry["versions"])} if entry else None

    def register(self, ami: str, bom_digest: str, versions: Mapping[str, str]) -> None:
        """Record what `ami` carries unless it is known already (an image never changes)."""
        if ami in self.by_ami:
            return
        self.by_ami[ami] = {"bom_digest": bom_digest, "versions": dict(sorted(versions.items()))}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.by_ami, sort_keys=True))


class VersionFaults:
    """component -> version -> bandwidth factor (0 < factor <= 1) for every node running it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw = read_json(path)
        self.factors: dict[str, dict[str, float]] = raw if isinstance(raw, dict) else {}

    def factor(self, versions: Mapping[str, str]) -> float:
        f = 1.0
        for component, by_version in self.factors.items():
            f *= by_version.get(versions.get(component, ""), 1.0)
        return f

    def set(self, component: str, version: str, factor: float) -> None:
        if not 0 < factor <= 1:
            raise ValueError(f"a version's bandwidth factor is in (0, 1], got {factor}")
        self.factors.setdefault(component, {})[version] = factor
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.factors, sort_keys=True))
