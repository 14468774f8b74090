"""What the benches measure, and how each printed figure says what it is.

Every line a bench prints starts with one of three labels, so that a reader never takes arithmetic
for a timing:
- `measured:` wall time, CPU time or memory on this machine, with how many runs (min and median
  when more than one): `timed` and `peak_traced` below;
- `modelled:` from the simulator's clock or the arithmetic of its constants (durations, rates):
  the same on every machine, and no evidence of speed;
- `counted:` exact counts of this run (nodes, API calls, rounds, resources): the same on every machine.

A ratio compares like with like from the same run: measured with measured, modelled with modelled.
"""

from __future__ import annotations

import gc
import resource
import statistics
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Timing:
    """Wall and CPU seconds of `runs` calls of one callable (CPU: this process and its finished children)."""

    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    result: Any  # what the last call returned

    @property
    def runs(self) -> int:
        return len(self.wall_s)

    @property
    def min_s(self) -> float:
        return min(self.wall_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def cpu_min_s(self) -> float:
        return min(self.cpu_s)

    def wall(self, unit: str = "s") -> str:
        """`1.23 s` for one run; `min 1.20 / median 1.23 s over 3 runs` for more."""
        scale, digits = (1000.0, 1) if unit == "ms" else (1.0, 3)
        if self.runs == 1:
            return f"{self.min_s * scale:.{digits}f} {unit} (1 run)"
        return (f"min {self.min_s * scale:.{digits}f} / median {self.median_s * scale:.{digits}f} {unit} "
                f"over {self.runs} runs")


def cpu_seconds() -> float:
    """User + system CPU of this process and its waited-for children: the work, whatever else runs."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], Any], runs: int = 1, warmup: int = 0) -> Timing:
    """Call `fn` `warmup` times untimed, then `runs` times, each timed alone (untraced, after a gc)."""
    for _ in range(warmup):
        fn()
    walls, cpus, result = [], [], None
    for _ in range(runs):
        gc.collect()
        c, t = cpu_seconds(), time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu_seconds() - c)
    return Timing(tuple(walls), tuple(cpus), result)


def peak_traced(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(result, peak bytes of Python allocations) of one traced call: a run apart from the timed
    ones, since tracemalloc hooks every allocation and slows the code several times over."""
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def peak_rss_mib() -> float:
    """The peak resident memory of this whole process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measured(text: str) -> None:
    print(f"measured: {text}")


def modelled(text: str) -> None:
    print(f"modelled: {text}")


def counted(text: str) -> None:
    print(f"counted: {text}")
