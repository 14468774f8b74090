"""`gpufleet ops serve` on a simulated stack with the job stream (`gpufleet:simulator.jobStream`, as
the shipped `local` stack sets it): its /metrics shows the stream's running jobs as busy nodes, the
ones patrol yields to (issue 24 item 5), so the alerts Prometheus gates on `gpufleet_node_busy`
(GpuUtilisationLow ...) can fire on `local`. Was: ops serve built its pool without the stream, and
every node read idle. The view takes no lock and reads the pool and the journals at each scrape: a
node the webhook quarantines leaves the stream at once."""

from __future__ import annotations

import json
import re
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from tests.daytwo.fleet import STACK, copy_project, pool_doc, state_dir
from tests.ops.alertmanager import alert
from tests.ops.serving import Served, start, write_token
from tests.rollout.project import make_project

BUSY = re.compile(r'^gpufleet_node_busy\{node="([^"]+)"\} ([01])$', re.M)
STATE = re.compile(r'^gpufleet_node_admitted\{node="([^"]+)",partition="[^"]*",state="([a-z]+)"\} [01]$', re.M)


@pytest.fixture(scope="module")
def streamed_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """crash40 with the job stream, seeded so its partition runs independent unit jobs (seed 3: some
    nodes between jobs at the simulated clock's now, most held)."""
    project = make_project(tmp_path_factory.mktemp("ops-stream") / "project")
    stack = project / "stacks" / f"Pulumi.{STACK}.yaml"
    text = stack.read_text()
    assert "  gpufleet:simulator:\n    seed: 7\n" in text
    stack.write_text(text.replace("  gpufleet:simulator:\n    seed: 7\n", "  gpufleet:simulator:\n    seed: 3\n    jobStream: true\n"))
    out = CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", STACK])
    assert out.exit_code == 0, out.output
    return project


@pytest.fixture
def streamed(streamed_base: Path, tmp_path: Path) -> Iterator[Served]:
    project = copy_project(streamed_base, tmp_path / "project")
    write_token(project)
    with start(project, tmp_path / "serve.log", [], {}) as s:
        yield s


def _metrics(served: Served) -> tuple[dict[str, bool], dict[str, str]]:
    with urllib.request.urlopen(served.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return {n: v == "1" for n, v in BUSY.findall(text)}, dict(STATE.findall(text))


def _held_by_the_stream(project: Path) -> set[str]:
    """What the stream holds at the simulated clock's now, computed here from the plan, the admitted
    nodes' records and patrol's clock (the day-two context's), by `gpufleet.sim.jobs.stream` itself."""
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.plan import build_plan
    from gpufleet.project import load_project
    from gpufleet.sim.jobs import Unit, stream
    from gpufleet.spec import load_stack_path

    with open_day_two(STACK, "test", project=load_project(project)) as d:
        now = d.now().timestamp()
    plan = build_plan(load_stack_path(project / "stacks" / f"Pulumi.{STACK}.yaml"))
    units = [Unit(str(u.id), u.partition or "-", tuple(plan.nodes[i].name for i in u.nodes), len(u.gpus))
             for u in plan.units]
    records = {p.stem: json.loads(p.read_text()) for p in (state_dir(project) / "records").glob("*.json")}
    admitted = {s for s, n in pool_doc(project)["nodes"].items() if n["state"] == "admitted"}
    spans = {s: [(datetime.fromisoformat(records[s]["decided_at"]).timestamp(), float("inf"))] for s in admitted}
    return {n for j in stream(units, spans, now, seed=3) if j.end is None and j.start <= now for n in j.nodes}


def test_metrics_show_the_streams_running_jobs_as_busy_nodes(streamed: Served, monkeypatch) -> None:
    monkeypatch.setenv("GPUFLEET_PROJECT", str(streamed.project))
    busy, states = _metrics(streamed)
    admitted = {s for s, st in states.items() if st == "admitted"}
    held = _held_by_the_stream(streamed.project)
    assert {s for s, b in busy.items() if b} == held
    assert held and held < admitted  # jobs hold most nodes; some are between two jobs
    assert not any(n.get("busy") for n in pool_doc(streamed.project)["nodes"].values())  # nobody set busy by hand


def test_a_node_the_webhook_quarantines_leaves_the_stream_at_the_next_scrape(streamed: Served, monkeypatch) -> None:
    monkeypatch.setenv("GPUFLEET_PROJECT", str(streamed.project))
    busy, _states = _metrics(streamed)
    slot = sorted(s for s, b in busy.items() if b)[0]
    code, answer = streamed.send(alert(slot, name="GpuXidFatal"))
    assert code == 200 and answer["quarantined"] == [slot], answer
    busy, states = _metrics(streamed)
    assert states[slot] == "quarantined" and busy[slot] is False
    assert {s for s, b in busy.items() if b} == _held_by_the_stream(streamed.project)
