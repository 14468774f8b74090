"""`gpufleet ops serve` as a process on 127.0.0.1 against a rolled-out simulated stack (crash40:
40 admitted nodes in partition train), fed Alertmanager version-4 notifications over HTTP."""

from __future__ import annotations

import http.client
import json
import os
import urllib.request
from pathlib import Path
from typing import Any

from tests.daytwo.fleet import daytwo_events, pool_doc, state_dir
from tests.ops.alertmanager import alert, notification
from tests.ops.serving import Served, fleet_base, served  # noqa: F401 - fixtures

def _nodes(project: Path) -> dict[str, dict[str, Any]]:
    return pool_doc(project)["nodes"]


TRANSPORT = ("webhook accepted", "webhook refused")


def all_audit(project: Path) -> list[dict[str, Any]]:
    """Every entry after the fixture's rollout, the webhook's own calls included."""
    path = state_dir(project) / "audit.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    assert [e["what"] for e in entries[:1]] == ["rollout"]
    return entries[1:]


def _audit(project: Path) -> list[dict[str, Any]]:
    """The fleet-changing entries (and pages) after the rollout, without the webhook's call records."""
    return [e for e in all_audit(project) if e["what"] not in TRANSPORT]


def test_a_firing_node_alert_quarantines_with_the_alert_as_reason_journaled_and_audited(served: Served) -> None:
    slot = sorted(_nodes(served.project))[7]
    code, answer = served.send(alert(slot, name="GpuRowRemapFailure"))
    assert code == 200 and answer["quarantined"] == [slot], answer
    node = _nodes(served.project)[slot]
    assert node["state"] == "quarantined" and node["reason_code"] == "GpuRowRemapFailure"
    event = daytwo_events(served.project)[-1]
    assert (event["action"], event["slot"], event["source"], event["who"]) == ("quarantine", slot, "alert", "alertmanager")
    assert event["evidence"]["labels"]["alertname"] == "GpuRowRemapFailure"
    (entry,) = _audit(served.project)
    assert (entry["what"], entry["target"], entry["who"]) == ("alert quarantine", slot, "alertmanager")
    # Alertmanager repeats the notification: nothing more happens
    assert served.send(alert(slot, name="GpuRowRemapFailure"))[1]["quarantined"] == []
    assert len(_audit(served.project)) == 1


def test_forty_percent_of_a_partition_alerting_quarantines_at_most_the_share(served: Served) -> None:
    nodes = sorted(_nodes(served.project))
    assert len(nodes) == 40  # all in partition train; gpufleet:ops.maxQuarantineShare defaults to 10%
    firing = [alert(s) for s in nodes[:16]]
    code, answer = served.send(*firing[:10])
    assert code == 200
    code, second = served.send(*firing[10:])  # the same outage, a later notification
    assert code == 200
    quarantined = [s for s, n in _nodes(served.project).items() if n["state"] == "quarantined"]
    assert len(quarantined) == 4 == len(answer["quarantined"]) + len(second["quarantined"])
    # 12 alerts paged, and the circuit breaker's trip: a storm of 40% trips it (gpufleet.daytwo.breaker)
    assert len(answer["paged"]) + len(second["paged"]) == 13
    assert [p["alertname"] for p in answer["paged"] + second["paged"]].count("CircuitBreaker") == 1
    assert served.wait_log("PAGE stack=crash40", 13).count("PAGE stack=crash40") == 13
    pages = [e for e in _audit(served.project) if e["what"] == "alert page" and e["target"]]
    assert len(pages) == 12 and all(e["who"] == "alertmanager" for e in pages)


def test_malformed_payloads_get_400_and_a_log_line_never_an_action(served: Served) -> None:
    before = _nodes(served.project)
    bad = [b"not json", json.dumps({"version": "3", "alerts": []}).encode(),
           json.dumps(notification(alert(sorted(_nodes(served.project))[0])) | {"alerts": [{"labels": "x"}]}).encode()]
    for body in bad:
        code, answer = served.post(body)
        assert code == 400 and "error" in answer
    assert served.log_text().count("rejected a malformed notification") == 3
    conn = http.client.HTTPConnection(served.url.removeprefix("http://"), timeout=30)
    conn.putrequest("POST", "/")
    conn.putheader("Content-Length", "lots")
    conn.putheader("Authorization", f"Bearer {served.token}")
    conn.endheaders()
    assert conn.getresponse().status == 400
    conn.close()
    assert _nodes(served.project) == before and _audit(served.project) == []
    refused = [e for e in all_audit(served.project) if e["what"] == "webhook refused"]
    assert [e["details"]["status"] for e in refused] == [400] * 4


def test_unknown_nodes_are_logged_and_ignored_and_resolved_alerts_never_readmit(served: Served) -> None:
    slot = sorted(_nodes(served.project))[11]
    code, answer = served.send(alert("gpu-not-in-this-pool"))
    assert code == 200 and answer["ignored"][0]["why"] == "not a node of this pool"
    assert "ignored alert GpuXidFatal for gpu-not-in-this-pool" in served.log_text()
    served.send(alert(slot))
    code, answer = served.send(alert(slot, status="resolved"))
    assert code == 200 and answer["quarantined"] == [] and "readmit" in answer["ignored"][0]["why"]
    assert _nodes(served.project)[slot]["state"] == "quarantined"


def test_metrics_expose_admitted_and_busy_nodes(served: Served) -> None:
    with urllib.request.urlopen(served.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    assert text.count('gpufleet_node_admitted{node="crash40-') == 40
    first = sorted(_nodes(served.project))[0]
    assert f'gpufleet_node_busy{{node="{first}"}} 0' in text


def test_a_locked_stack_queues_the_notification_and_applies_it_once_the_lock_is_free(served: Served) -> None:
    """Was: 503 naming the holder. Now the worker retries under its backoff while the answer says
    queued (2xx: Alertmanager does not resend), and the answer names no pid or host."""
    import socket
    import time

    from gpufleet.daytwo.context import open_day_two
    from gpufleet.project import find_project

    slot = sorted(_nodes(served.project))[2]
    with open_day_two("crash40", "another operation", pool_only=True, project=find_project(served.project)):
        code, answer = served.send(alert(slot))
        assert code == 202 and answer["queued"] is True, answer
        assert _nodes(served.project)[slot]["state"] == "admitted"
    assert str(os.getpid()) not in json.dumps(answer) and socket.gethostname() not in json.dumps(answer)
    deadline = time.monotonic() + 30
    while _nodes(served.project)[slot]["state"] != "quarantined":
        assert time.monotonic() < deadline, served.log_text()[-2000:]
        time.sleep(0.2)
    assert "not applied yet (LockHeld" in served.log_text()


def test_pages_go_to_the_page_command_as_json(tmp_path: Path) -> None:
    from gpufleet.ops.actions import page
    from gpufleet.ops.webhook import Page

    out = tmp_path / "pages.json"
    page([Page("GpuXidFatal", "n1", "partition train is at its alert budget", {"labels": {"node": "n1"}})], "s",
         ["sh", "-c", f"cat > {out}"])
    doc = json.loads(out.read_text())
    assert doc["stack"] == "s" and doc["pages"][0]["slot"] == "n1" and doc["pages"][0]["evidence"]["labels"]
