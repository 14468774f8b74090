"""A simulated stack can be told to drift: the injections `drift` and `audit` then report.

Injections live in `<state_dir>/sim/drift.json` (replaced atomically), so they persist across
commands: `gpufleet sim inject -s local --skew nccl=2.26.5 --slot local-b0003-n00015`, then
`gpufleet audit -s local` names that node. `--clear` forgets them all. How the simulated stack
answers the reports with them is `gpufleet.reports.sim_sources`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from gpufleet.errors import ConfigError
from gpufleet.gates import versions as gv
from gpufleet.plan.model import ClusterPlan
from gpufleet.project import Project
from gpufleet.sim.world import read_json, write_atomic

DRIFT_FILE = "drift.json"


@dataclass
class Injections:
    """What has been injected into a simulated stack (all keyed by slot, except orphans)."""

    skew: dict[str, dict[str, str]] = field(default_factory=dict)  # slot -> component -> installed version
    no_facts: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # slot -> check-mode tasks that would change
    orphans: list[dict[str, str]] = field(default_factory=list)  # {id, instance_type}
    cloud: dict[str, dict[str, str]] = field(default_factory=dict)  # slot -> instance output field -> cloud value

    @classmethod
    def load(cls, path: Path) -> Injections:
        doc = read_json(path)
        if not isinstance(doc, dict):
            return cls()
        return cls(skew=doc.get("skew") or {}, no_facts=doc.get("no_facts") or [], changed=doc.get("changed") or {},
                   orphans=doc.get("orphans") or [], cloud=doc.get("cloud") or {})

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"skew": self.skew, "no_facts": sorted(set(self.no_facts)),
                                       "changed": self.changed, "orphans": self.orphans, "cloud": self.cloud},
                                      sort_keys=True, indent=1))


def drift_file(project: Project, stack: str) -> Path:
    return project.state_dir(stack) / "sim" / DRIFT_FILE


def inject(project: Project, stack: str, plan: ClusterPlan, slots: Sequence[str], *,
           skew: Mapping[str, str] = {}, no_facts: bool = False, changed: Sequence[str] = (),
           orphans: int = 0, cloud: Mapping[str, str] = {}, instance_type: str = "") -> Injections:
    """Add injections for `slots` (checked against the plan and the BOM's component keys first:
    nothing is written on a bad argument)."""
    known = {s.name for s in plan.nodes}
    bad = [s for s in slots if s not in known]
    if bad:
        raise ConfigError(f"slot(s) {', '.join(bad)} not in the stack's plan", field="--slot",
                          expected=f"a slot name such as {plan.nodes[0].name}")
    unknown = [k for k in skew if k not in gv.BY_KEY]
    if unknown:
        raise ConfigError(f"unknown component(s) {', '.join(unknown)}", field="--skew",
                          expected="COMPONENT=VERSION with COMPONENT one of " + ", ".join(sorted(gv.BY_KEY)))
    if (skew or no_facts or changed or cloud) and not slots:
        raise ConfigError("nothing to inject into", field="--slot", expected="at least one --slot")
    path = drift_file(project, stack)
    inj = Injections.load(path)
    for s in slots:
        if skew:
            inj.skew.setdefault(s, {}).update(skew)
        if no_facts:
            inj.no_facts.append(s)
        if changed:
            inj.changed.setdefault(s, []).extend(x for x in changed if x not in inj.changed.get(s, []))
        if cloud:
            inj.cloud.setdefault(s, {}).update(cloud)
    start = len(inj.orphans)
    for n in range(orphans):
        inj.orphans.append({"id": f"i-0fab{start + n:013x}", "instance_type": instance_type})
    inj.save(path)
    return inj


def clear(project: Project, stack: str) -> None:
    drift_file(project, stack).unlink(missing_ok=True)
