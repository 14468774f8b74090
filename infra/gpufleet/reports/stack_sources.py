"""Which sources answer the drift and audit reports for a stack: the simulator for a simulated
stack (gpufleet.reports.sim_sources), the real cloud and nodes for any other (gpufleet.reports.sources)."""

from __future__ import annotations

from typing import Any

from gpufleet.reports.sim_sources import sim_sources
from gpufleet.reports.sources import Sources, real_sources


def stack_sources(spec: Any, plan: Any, project: Any, stack: str) -> Sources:
    """The simulator answers for a simulated stack; the real cloud and nodes for any other."""
    if spec.simulated:
        return sim_sources(spec, plan, project, stack)
    return real_sources(spec, project, stack)
