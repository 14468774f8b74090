"""Alert to quarantine through `gpufleet ops serve`, and a fleet-wide alert storm at 1,250 nodes.

Run: `python bench/bench_ops.py`. Figures are printed with a ratio to a baseline measured in the
same run, so they compare across machines:
- latency: one Alertmanager notification (one node alert) over HTTP on 127.0.0.1 until the node is
  quarantined in the simulated pool of the rolled-out `local` stack (lock, pool write, journal,
  audit line, answer), against one GET /metrics round trip (a pool read and an answer);
- storm: a 1,250-alert notification (every node of a 10,000-GPU pool alerting: an outage or a bad
  rule) parsed and decided, against `json.loads` of the same body; the decision must quarantine
  no more than the alert budget.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from click.testing import CliRunner  # noqa: E402

from gpufleet.cli import main  # noqa: E402
from gpufleet.ops import actions, server  # noqa: E402
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


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_storm() -> None:
    parts = ["train"] * 800 + ["sim"] * 300 + ["debug"] * 150
    state = PoolState({f"n{i:05d}": PoolNode(f"n{i:05d}", NodeState.ADMITTED, partition=p) for i, p in enumerate(parts)})
    body = json.dumps(notification(sorted(state.nodes)))
    baseline = min(timed(lambda: json.loads(body)) for _ in range(5))
    result = {}
    took = min(timed(lambda: result.update(d=decide(Notification.model_validate_json(body), state, SHARE)))
               for _ in range(5))
    d = result["d"]
    assert len(d.quarantine) == 80 + 30 + 15 and len(d.page) == NODES - len(d.quarantine)
    print(f"storm: {NODES} alerts in one notification ({len(body) / 1e6:.1f} MB) parsed and decided in "
          f"{took * 1000:.0f} ms = {took / baseline:.1f}x json.loads ({baseline * 1000:.0f} ms); "
          f"{len(d.quarantine)} quarantined ({SHARE:.0%} of each partition), {len(d.page)} paged")


def bench_latency(rounds: int = 5) -> None:
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
        httpd = server.serve("127.0.0.1", 0, lambda note: actions.handle(note, "local", project).summary(), pool.state)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        try:
            metrics = min(timed(lambda: urllib.request.urlopen(url + "/metrics", timeout=30).read()) for _ in range(5))
            latencies = []
            for slot in admitted[:: max(1, len(admitted) // rounds)][:rounds]:
                body = json.dumps(notification([slot])).encode()
                req = urllib.request.Request(url + "/", data=body, headers={"Content-Type": "application/json"})
                latencies.append(timed(lambda: urllib.request.urlopen(req, timeout=30).read()))
                assert pool.state().nodes[slot].state is NodeState.QUARANTINED, slot
        finally:
            httpd.shutdown()
            httpd.server_close()
    mid = sorted(latencies)[len(latencies) // 2]
    print(f"latency: `local` stack ({len(admitted)} admitted nodes, rolled out in {rolled:.0f} s): alert to quarantine "
          f"median {mid * 1000:.0f} ms over {len(latencies)} notifications (max {max(latencies) * 1000:.0f} ms) = "
          f"{mid / metrics:.1f}x one GET /metrics ({metrics * 1000:.1f} ms)")


if __name__ == "__main__":
    bench_storm()
    bench_latency()
