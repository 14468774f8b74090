"""Admitting 1,250 nodes (10,000 GPUs) through the Kubernetes pool adapter against the fake API server.

Run: `python bench/bench_pool_kubernetes.py [NODES]`. The API server is the tests' fake
(tests/pool/kubernetes_fake_api.py: real HTTP on loopback, label selectors, merge patches with
resourceVersion), so the figures measure the adapter and the client, not an etcd. Each figure is
printed with its API calls and a ratio to a baseline measured in the same run: one round trip
that reads one Node by its slot label (what every admission starts with). A second run injects
500s into 2% of the requests to show what the backoff costs (with a 1 ms base: a real policy
waits longer, by design). The baseline is the min (and median) of 20 reads; the admissions and
registrations change the pool and are one run each.
"""

from __future__ import annotations

import random
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "pool"), str(ROOT / "bench")]

from _measure import counted, measured, timed  # noqa: E402

from kubernetes_fake_api import FakeApiServer  # noqa: E402

from gpufleet.gates.admission import AdmissionRecord, BusbwFigures  # noqa: E402
from gpufleet.gates.verdict import Action, CheckResult, Verdict  # noqa: E402
from gpufleet.pool.kubernetes.adapter import KubernetesPool  # noqa: E402
from gpufleet.pool.kubernetes.api import KubeApi  # noqa: E402
from gpufleet.pool.kubernetes.nodes import SLOT_LABEL  # noqa: E402
from gpufleet.pool.kubernetes.retry import RetryPolicy  # noqa: E402
from gpufleet.pool.protocol import NodeState, PendingNode  # noqa: E402

CHECK = CheckResult(check_id="nccl.intra_node", severity="Q", measured="480 GB/s", expected=">= 430 GB/s",
                    verdict=Verdict.PASS, research_ref="gates-research.md (b)")


def record(node: PendingNode) -> AdmissionRecord:
    return AdmissionRecord(slot=node.slot, instance_id=node.instance_id, instance_type="p5.48xlarge", stack="bench",
                           batch=1 + node.block // 5, block=node.block, bom_digest="sha256:" + "ab" * 32,
                           verdict=Verdict.PASS, action=Action.ADMIT, checks=(CHECK,),
                           busbw=BusbwFigures(intra_node_gbs=480.0), decided_at=datetime(2026, 11, 30, tzinfo=timezone.utc))


def run(count: int, failure_rate: float) -> None:
    nodes = [PendingNode(slot=f"bench-b{i // 5:04d}-n{i:05d}", block=i // 5, partition="train" if i % 10 else "debug",
                         instance_id=f"i-{i:017x}") for i in range(count)]
    records = {n.slot: record(n) for n in nodes}
    with FakeApiServer() as server:
        for i, n in enumerate(nodes):
            server.kube.add_node(f"ip-10-{64 + i // 65000}-{i // 250 % 256}-{i % 250}.ec2.internal", n.slot,
                                 instance_id=n.instance_id)
        rng = random.Random(11)
        if failure_rate:
            server.kube.on_request = lambda kube, m, p: kube.fail(500, times=1) if rng.random() < failure_rate else None
        api = KubeApi(server.api_client(), RetryPolicy(deadline_s=60, base_s=0.001, cap_s=0.05))
        pool = KubernetesPool(api, partitions=["train", "debug"])
        baseline = timed(lambda: list(api.list_nodes(f"{SLOT_LABEL}={nodes[0].slot}")), runs=20)
        one = baseline.min_s
        api.calls = 0
        register = timed(lambda: pool.register_pending(nodes)).min_s
        register_calls, api.calls = api.calls, 0
        admit = timed(lambda: [pool.admit(n.slot, records[n.slot]) for n in nodes]).min_s
        admit_calls, api.calls = api.calls, 0
        state = pool.state()
        read = timed(pool.state).min_s
        assert len(state.by_state(NodeState.ADMITTED)) == count
        failed = sum(1 for _, _, s in server.kube.requests if s >= 500)
    label = f"{count} nodes" + (f", {failure_rate:.0%} of requests answered 500 ({failed} retried)" if failure_rate else "")
    counted(f"kubernetes pool, {label}: register_pending (1 call) {register_calls} API calls; admit x{count}: "
            f"{admit_calls} API calls; state(): {api.calls} API calls for both reads")
    measured(f"baseline: one Node read by slot label {baseline.wall('ms')}")
    measured(f"register_pending (1 call): {register:.2f} s (1 run)")
    measured(f"admit x{count}: {admit:.2f} s (1 run) = {admit / count * 1000:.2f} ms each "
             f"= {admit / count / one:.1f}x the baseline's min")
    measured(f"state(): {read * 1000:.0f} ms (1 run)")


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1250
    run(count, 0.0)
    run(count, 0.02)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
