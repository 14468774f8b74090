"""Planner speed and memory at 1,000 / 10,000 / 100,000 GPUs.

Prints time per plan (min and median over the runs) and peak traced memory (a separate traced
run), with ratios against the 1,000-GPU plan measured in the same run, so the figures mean the
same on any machine. Target: 10,000 GPUs in well under a second, cost growing linearly (time ratio
close to the GPU ratio).

Run: .venv/bin/python bench/bench_plan.py [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import measured, peak_traced, timed  # noqa: E402

from gpufleet.plan import build_plan  # noqa: E402
from gpufleet.spec import ClusterSpec  # noqa: E402

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


def run(sizes=SIZES, repeat: int = 3) -> list[dict]:
    rows = []
    for gpus in sizes:
        spec = spec_for(gpus)
        timing = timed(lambda: build_plan(spec), runs=repeat, warmup=1)  # warm-up: imports and caches
        _, peak = peak_traced(lambda: build_plan(spec))
        rows.append({"gpus": gpus, "timing": timing, "seconds": timing.min_s, "peak_bytes": peak})
    base = rows[0]
    for row in rows:
        row["time_ratio"] = row["seconds"] / base["seconds"]
        row["memory_ratio"] = row["peak_bytes"] / base["peak_bytes"]
        row["size_ratio"] = row["gpus"] / base["gpus"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per size")
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 GPUs only")
    args = parser.parse_args()
    sizes = SIZES[:2] if args.quick else SIZES
    measured(f"build_plan wall time over {args.repeat} runs per size (after one warm-up), peak traced memory "
             f"of one more traced run; x = against the {sizes[0]:,}-GPU plan of this run")
    measured(f"{'GPUs':>8} {'min ms':>9} {'median ms':>10} {'peak MiB':>9} {'size x':>7} {'time x':>7} {'mem x':>7}")
    for r in run(sizes, repeat=args.repeat):
        measured(f"{r['gpus']:>8} {r['timing'].min_s * 1000:>9.1f} {r['timing'].median_s * 1000:>10.1f} "
                 f"{r['peak_bytes'] / 2**20:>9.1f} {r['size_ratio']:>7.0f} {r['time_ratio']:>7.1f} "
                 f"{r['memory_ratio']:>7.1f}")


if __name__ == "__main__":
    main()
