"""The virtual clock: modelled time for a simulated rollout.

Why: the simulator's ports return modelled `duration_s`; whoever folds them into a timeline (the
rollout, knowing what runs in parallel) advances this clock, and everything the simulator stamps
(bundle manifests, launcher runs) reads it. It starts at a fixed instant, so the same rollout
gives the same timestamps, and it never reads the wall clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

EPOCH = datetime(2026, 7, 14, 8, 0, tzinfo=timezone.utc)


class VirtualClock:
    """`Clock` port (gpufleet.ports) over modelled seconds since `start`."""

    def __init__(self, start: datetime = EPOCH, elapsed_s: float = 0.0) -> None:
        self.start = start
        self.elapsed_s = elapsed_s

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed_s)

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self.elapsed_s += seconds
        return self.now()

    def set_elapsed(self, seconds: float) -> datetime:
        """Put the clock at `seconds` after its start (a resumed rollout replays its timeline)."""
        if seconds < 0:
            raise ValueError(f"elapsed time cannot be negative ({seconds} s)")
        self.elapsed_s = seconds
        return self.now()
