"""Time and peak memory of the Pulumi program under mocks, 1000 and 10,000 GPUs.

Run: `python bench/bench_program.py`. Each size is measured in the same run as a baseline
(the 16-GPU dev program) and printed as a ratio to it, so figures compare across machines.
All batches are deployed (target past the last batch), the worst case for the program.

Time and memory come from two separate runs: tracemalloc hooks every allocation and slows the
program several times over, so the timed run is untraced and the peak comes from a second,
traced run of the same program.
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpufleet.cloud.capture import capture_program  # noqa: E402
from gpufleet.spec import load_stack  # noqa: E402

ALL = 10**6


def scaled_spec(stack: str, gpus: int | None = None):
    """`stack`'s spec, optionally scaled to `gpus` (network widened to fit, no partitions)."""
    spec = load_stack(stack)
    if gpus is None:
        return spec
    return spec.model_copy(update={
        "cluster": spec.cluster.model_copy(update={"target_gpus": gpus}),
        "partitions": (),
        "network": spec.network.model_copy(update={"vpc_cidr": "10.0.0.0/16", "compute_subnet_cidr": "10.0.0.0/17",
                                                   "management_subnet_cidr": "10.0.128.0/24"})})


def timed_run(spec, stack: str) -> tuple[dict, float]:
    """One untraced run: resource counts and wall seconds."""
    gc.collect()
    start = time.perf_counter()
    cap = capture_program(spec, stack=stack, target_batch=ALL)
    seconds = time.perf_counter() - start
    counts = {"resources": len(cap.registrations), "instances": len(cap.of_type("aws:ec2/instance:Instance"))}
    return counts, seconds


def peak_mib(spec, stack: str) -> float:
    """Peak traced Python memory of a second run (tracemalloc on only for this one)."""
    gc.collect()
    tracemalloc.start()
    try:
        capture_program(spec, stack=stack, target_batch=ALL)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


def measure(stack: str, gpus: int | None = None) -> dict:
    """Time (untraced run) and peak memory (separate traced run) of `stack`'s program."""
    spec = scaled_spec(stack, gpus)
    counts, seconds = timed_run(spec, stack)
    return {"gpus": gpus or spec.cluster.target_gpus, **counts, "seconds": seconds,
            "peak_mib": peak_mib(spec, stack)}


def run(sizes: tuple[int, ...] = (1000, 10_000), stack: str = "local") -> list[dict]:
    measure("dev")  # warm-up: first imports and provider module loading would inflate the baseline
    base = measure("dev")
    rows = [{"label": "baseline dev", **base, "time_ratio": 1.0, "memory_ratio": 1.0}]
    for gpus in sizes:
        m = measure(stack, gpus)
        rows.append({"label": f"{stack} x{gpus}", **m, "time_ratio": m["seconds"] / base["seconds"],
                     "memory_ratio": m["peak_mib"] / base["peak_mib"]})
    return rows


def main() -> None:
    print(f"{'program':<18}{'GPUs':>7}{'resources':>10}{'instances':>10}{'seconds':>9}{'peak MiB':>10}"
          f"{'x time':>8}{'x mem':>7}")
    for r in run():
        print(f"{r['label']:<18}{r['gpus']:>7}{r['resources']:>10}{r['instances']:>10}{r['seconds']:>9.2f}"
              f"{r['peak_mib']:>10.1f}{r['time_ratio']:>8.1f}{r['memory_ratio']:>7.1f}")


if __name__ == "__main__":
    main()
