"""Alert to quarantine through `gpufleet ops serve`, and a fleet-wide alert storm at 1,250 nodes.

Run: `python bench/bench_ops.py [--rounds 5]`. Figures are printed with a ratio to a baseline measured in the
same run, so they compare across machines:
- latency: one Alertmanager notification (one node alert) over HTTP on 127.0.0.1 until the node is
  quarantined in the simulated pool of the rolled-out `local` stack (lock, pool write, journal,
  audit line, answer), with the bearer token, against one GET /metrics round trip (a pool read and
  an answer); throughput: 50 one-node notifications from 8 concurrent senders, answered;
- storm: a 1,250-alert notification (every node of a 10,000-GPU pool alerting: an outage or a bad
  rule) parsed and decided, against `json.loads` of the same body; the decision must quarantine
  no more than the alert budget.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import threading
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from _measure import counted, measured, timed  # noqa: E402

from click.testing import CliRunner  # noqa: E402

from gpufleet.cli import main  # noqa: E402
from gpufleet.ops import actions, audit, server  # noqa: E402
from gpufleet.ops.webhook import Notification, decide  # noqa: E402
from gpufleet.pool.factory import pool_for  # noqa: E402
from gpufleet.pool.protocol import NodeState, PoolNode, PoolState  # noqa: E402
from gpufleet.project import find_project  # noqa: E402
from gpufleet.spec import load_stack_path  # noqa: E402

NODES = 1_250
SHARE = 0.1


def notification(slots: list[str]) -> dict:
    alerts = [{"status": "firing", "labels": {"alertname": "GpuXidFatal", "node": s, "severity": "critical",
                                              "gpufleet_action": "quarantine"},
               "annotations": {"summary": "a GPU reported an Xid the gates quarantine on"},
               "startsAt": "2026-12-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
               "generatorURL": "http://prometheus:9090/graph", "fingerprint": f"{i:016x}"} for i, s in enumerate(slots)]
    return {"version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0, "status": "firing", "receiver": "gpufleet",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "", "alerts": alerts}


def bench_storm(runs: int = 5) -> None:
    parts = ["train"] * 800 + ["sim"] * 300 + ["debug"] * 150
    state = PoolState({f"n{i:05d}": PoolNode(f"n{i:05d}", NodeState.ADMITTED, partition=p) for i, p in enumerate(parts)})
    body = json.dumps(notification(sorted(state.nodes)))
    baseline = timed(lambda: json.loads(body), runs=runs)
    took = timed(lambda: decide(Notification.model_validate_json(body), state, SHARE), runs=runs)
    d = took.result
    assert len(d.quarantine) == 80 + 30 + 15 and len(d.page) == NODES - len(d.quarantine)
    measured(f"storm: {NODES} alerts in one notification ({len(body) / 1e6:.1f} MB) parsed and decided in "
             f"{took.wall('ms')} = {took.min_s / baseline.min_s:.1f}x json.loads ({baseline.wall('ms')}; min vs min)")
    counted(f"storm: {len(d.quarantine)} quarantined ({SHARE:.0%} of each partition), {len(d.page)} paged")


def bench_latency(rounds: int = 5, flood: int = 50) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        runner = CliRunner()
        made = runner.invoke(main, ["init", str(root), "--stack", "local"])
        assert made.exit_code == 0, made.output
        rolled = timed(lambda: runner.invoke(main, ["--project", str(root), "rollout", "-s", "local"]))
        project = find_project(root)
        spec = load_stack_path(project.stack_file("local"))
        pool = pool_for(spec, project, "local")
        admitted = sorted(n.slot for n in pool.state().by_state(NodeState.ADMITTED))
        token = secrets.token_urlsafe(32)
        state_dir = project.state_dir("local")
        audit_call = lambda what, why, details: audit.record(state_dir, "local", what, why, who="bench",  # noqa: E731
                                                             details=details)
        httpd = server.serve("127.0.0.1", 0, apply=lambda note: actions.handle(note, "local", project).summary(),
                             pool_state=pool.state, settings=server.Settings(token=token), audit=audit_call)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}

        def post(slots: list[str]) -> int:
            req = urllib.request.Request(url + "/", data=json.dumps(notification(slots)).encode(), headers=headers)
            with urllib.request.urlopen(req, timeout=60) as r:
                return int(r.status)

        try:
            metrics = timed(lambda: urllib.request.urlopen(url + "/metrics", timeout=30).read(), runs=5)
            latencies = []
            for slot in admitted[:: max(1, len(admitted) // rounds)][:rounds]:
                latencies.append(timed(lambda: post([slot])).min_s)
                assert pool.state().nodes[slot].state is not NodeState.ADMITTED, slot
            # throughput: `flood` one-node notifications from 8 senders at once (the budget pages most)
            rest = [s for s in admitted if pool.state().nodes[s].state is NodeState.ADMITTED]
            with ThreadPoolExecutor(8) as senders:
                storm = timed(lambda: list(senders.map(lambda i: post([rest[i % len(rest)]]), range(flood))))
            codes = Counter(storm.result)
        finally:
            httpd.shutdown()
            httpd.server_close()
    mid = statistics.median(latencies)
    measured(f"latency: `local` stack ({len(admitted)} admitted nodes, rolled out in {rolled.wall()}): alert to "
             f"quarantine with the bearer token min {min(latencies) * 1000:.0f} / median {mid * 1000:.0f} / max "
             f"{max(latencies) * 1000:.0f} ms over {len(latencies)} notifications (one node each) = "
             f"{mid / metrics.median_s:.1f}x one GET /metrics ({metrics.wall('ms')}; median vs median)")
    measured(f"throughput: {flood} one-node notifications from 8 concurrent senders with the token answered in "
             f"{storm.wall()} = {flood / storm.min_s:.1f} notifications/s (answers {dict(codes)}; one worker applies "
             f"all it finds waiting under one take of the stack lock)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="timed runs of the storm, notifications of the latency")
    args = ap.parse_args()
    bench_storm(args.rounds)
    bench_latency(args.rounds)
