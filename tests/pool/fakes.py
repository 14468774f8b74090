"""A small fake Launcher for pool tests: records what it was asked and answers every spec."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool.protocol import LaunchResult


class RecordingLauncher:
    """Answers each spec with exit 0 and a line per node; `calls` keeps every batch it ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[LaunchSpec, ...]] = []

    def run(self, specs: Sequence[LaunchSpec], timeout_s: float) -> list[LaunchResult]:
        self.calls.append(tuple(specs))
        now = datetime.now(timezone.utc)
        return [LaunchResult(name=s.name, nodes=s.nodes, exit_code=0, output="".join(f"{n}: ok\n" for n in s.nodes),
                             started=now, ended=now, command=s.command_line) for s in specs]
