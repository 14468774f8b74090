"""How the patrol collects its light bundles: a port, with the real adapter over ansible-runner.

The real adapter runs `playbooks/preflight.yml` with the patrol's command list as extra vars
(`gpufleet.daytwo.patrol.light_commands`, which win over the play's own list): the same collection,
fetch and manifest code as a rollout's preflight, only the light commands. The simulator's adapter
is `gpufleet.sim.patrol.SimPatrolCollector`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from gpufleet.daytwo.patrol import PATROL_FILES, light_commands
from gpufleet.ports import Instance, StageResult


class PatrolCollector(Protocol):
    def collect(self, instances: Sequence[Instance], since: Mapping[str, datetime | None], dest: Path) -> StageResult:
        """One light bundle per reachable node under dest/<slot>/ (kernel log since `since[slot]` at least)."""
        ...


class AnsiblePatrolCollector:
    def __init__(self, make_executor: Any, gpus: int) -> None:
        self.make_executor = make_executor  # commands -> gpufleet.configure.executor.AnsibleExecutor
        self.gpus = gpus

    def collect(self, instances: Sequence[Instance], since: Mapping[str, datetime | None], dest: Path) -> StageResult:
        known = [s for s in since.values() if s is not None]
        oldest = min(known) if len(known) == len(since) and known else None
        executor = self.make_executor(light_commands(self.gpus, oldest))
        return executor.preflight(instances, dest)


def collector_for(d: Any) -> PatrolCollector:
    """The simulator's collector on a simulated stack, else preflight.yml over the stack's connection."""
    if d.simulator is not None:
        from gpufleet.sim.patrol import SimPatrolCollector

        return SimPatrolCollector(d.simulator, PATROL_FILES)
    from gpufleet import catalog
    from gpufleet.configure.executor import AnsibleExecutor

    base = d.adapters.executor
    if not isinstance(base, AnsibleExecutor):
        raise TypeError(f"the patrol collects through preflight.yml; this stack's executor is {type(base).__name__}")

    def make(commands: list[dict]) -> AnsibleExecutor:
        return AnsibleExecutor(base.runner, base.connection, base.site_vars, groups=base.groups, context=base.context,
                               preflight_vars={**base.preflight_vars, "gpufleet_commands": commands})

    return AnsiblePatrolCollector(make, catalog.get(d.spec.cluster.instance_type).gpus)
