"""Planner speed and memory at 1,000 / 10,000 / 100,000 GPUs.

Prints time per plan and peak traced memory, with ratios against the 1,000-GPU plan
measured in the same run, so the figures mean the same on any machine. Target: 10,000
GPUs in well under a second, cost growing linearly (time ratio close to the GPU ratio).

Run: .venv/bin/python bench/bench_plan.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from gpufleet.plan import build_plan
from gpufleet.spec import ClusterSpec

SIZES = (1_000, 10_000, 100_000)


def spec_for(gpus: int) -> ClusterSpec:
    nodes = gpus // 8  # 100,000 GPUs = 12,500 nodes: a /17 still holds them with headroom
    return ClusterSpec.from_raw({
        "cluster": {"name": "bench", "region": "us-east-1", "availabilityZone": "us-east-1a",
                    "instanceType": "p5.48xlarge", "targetGpus": gpus, "unitGpus": 10, "spareFraction": 0.04},
        "partitions": [{"name": "train", "mode": "data-parallel", "units": gpus // 10 * 8 // 10},
                       {"name": "debug", "mode": "interactive", "units": 4}],
        "network": {"vpcCidr": "10.0.0.0/16", "computeSubnetCidr": "10.0.0.0/17",
                    "managementSubnetCidr": "10.0.128.0/24"},
        "rollout": {"batchSize": max(25, nodes // 20)},
        "pool": {"type": "sim"},
    }, source=f"bench-{gpus}")


def measure(gpus: int, repeat: int) -> tuple[float, int]:
    spec = spec_for(gpus)
    build_plan(spec)  # warm imports and caches
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        build_plan(spec)
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    build_plan(spec)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak


def run(sizes=SIZES, repeat: int = 3) -> list[dict]:
    rows = []
    for gpus in sizes:
        seconds, peak = measure(gpus, repeat)
        rows.append({"gpus": gpus, "seconds": seconds, "peak_bytes": peak})
    base = rows[0]
    for row in rows:
        row["time_ratio"] = row["seconds"] / base["seconds"]
        row["memory_ratio"] = row["peak_bytes"] / base["peak_bytes"]
        row["size_ratio"] = row["gpus"] / base["gpus"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'GPUs':>8} {'time/plan':>11} {'peak mem':>10} {'size x':>7} {'time x':>7} {'mem x':>7}")
    for r in run(repeat=args.repeat):
        print(f"{r['gpus']:>8} {r['seconds'] * 1000:>9.1f}ms {r['peak_bytes'] / 2**20:>8.1f}MiB "
              f"{r['size_ratio']:>7.0f} {r['time_ratio']:>7.1f} {r['memory_ratio']:>7.1f}")


if __name__ == "__main__":
    main()
