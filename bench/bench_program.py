"""Time and peak memory of the Pulumi program under mocks, 1000 and 10,000 GPUs.

Run: `python bench/bench_program.py [--runs N] [--quick]`. Each size is measured in the same run as
a baseline (the 16-GPU dev program) and printed as a ratio to it, so figures compare across
machines. All batches are deployed (target past the last batch), the worst case for the program.

Time and memory come from separate runs: tracemalloc hooks every allocation and slows the
program several times over, so the timed runs are untraced and the peak comes from one more,
traced run of the same program.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from _measure import measured, peak_traced, timed  # noqa: E402

from gpufleet.program.capture import capture_program  # noqa: E402
from gpufleet.spec import load_stack  # noqa: E402

ALL = 100_000  # every batch: rollout.targetBatch's ceiling in the spec


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


def measure(stack: str, gpus: int | None = None, runs: int = 1) -> dict:
    """Time (`runs` untraced runs) and peak memory (one more, traced run) of `stack`'s program."""
    spec = scaled_spec(stack, gpus)
    timing = timed(lambda: capture_program(spec, stack=stack, target_batch=ALL), runs=runs)
    cap = timing.result
    _, peak = peak_traced(lambda: capture_program(spec, stack=stack, target_batch=ALL))
    return {"gpus": gpus or spec.cluster.target_gpus, "resources": len(cap.registrations),
            "instances": len(cap.of_type("aws:ec2/instance:Instance")), "timing": timing, "seconds": timing.min_s,
            "peak_mib": peak / 2**20}


def run(sizes: tuple[int, ...] = (1000, 10_000), stack: str = "local", runs: int = 1) -> list[dict]:
    capture_program(load_stack("dev"), stack="dev", target_batch=ALL)  # warm-up: first imports and provider loading
    base = measure("dev", runs=runs)
    rows = [{"label": "baseline dev", **base, "time_ratio": 1.0, "memory_ratio": 1.0}]
    for gpus in sizes:
        m = measure(stack, gpus, runs=runs)
        rows.append({"label": f"{stack} x{gpus}", **m, "time_ratio": m["seconds"] / base["seconds"],
                     "memory_ratio": m["peak_mib"] / base["peak_mib"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per program")
    ap.add_argument("--quick", action="store_true", help="1,000 GPUs only, one timed run")
    args = ap.parse_args()
    sizes, runs = ((1000,), 1) if args.quick else ((1000, 10_000), args.runs)
    measured(f"the program under mocks, wall time over {runs} run(s) each (untraced), peak traced memory of one "
             "more traced run; x = against the dev program of this run")
    measured(f"{'program':<18}{'GPUs':>7}{'resources':>10}{'instances':>10}{'min s':>8}{'median s':>9}"
             f"{'peak MiB':>10}{'x time':>8}{'x mem':>7}")
    for r in run(sizes, runs=runs):
        measured(f"{r['label']:<18}{r['gpus']:>7}{r['resources']:>10}{r['instances']:>10}{r['timing'].min_s:>8.2f}"
                 f"{r['timing'].median_s:>9.2f}{r['peak_mib']:>10.1f}{r['time_ratio']:>8.1f}{r['memory_ratio']:>7.1f}")


if __name__ == "__main__":
    main()
