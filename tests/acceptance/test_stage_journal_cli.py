"""`gpufleet rollout -s local` and its acceptance stages end to end: the three stages in the journal,
the plain display and every report; a real process SIGKILLed (the journal's kill hook) between the
smoke stage's start and its verdict, resumed to the uninterrupted result with only that stage run
again; journals written before the stages were journaled (outcome files only), one mid-rollout and
one halted by a failed storage check, resumed, and that halt lifted by `--retry-stage`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpufleet import catalog
from gpufleet.gates import acceptance as A
from gpufleet.plan import build_plan
from gpufleet.rollout import journal as journal_mod
from gpufleet.sim import acceptance as S
from gpufleet.spec import load_stack
from tests.acceptance.helpers import bundle
from tests.rollout.e2e import journal_state, rollout, snapshot
from tests.rollout.project import make_project, seed_program_cache

pytestmark = pytest.mark.slow
STACK = "local"
STAGES = ["storage", "network", "smoke"]


def _cli(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpufleet.cli", "--project", str(project), "rollout", "-s", STACK,
                           *args], env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300)


def _events(project: Path) -> list[dict]:
    path = project / ".gpufleet" / STACK / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _stage_events(project: Path) -> list[tuple[str, str]]:
    return [(e["stage"], e["to"]) for e in _events(project) if e["type"] == "acceptance"]


def _report(project: Path) -> dict:
    return json.loads((project / "reports" / STACK / "rollout.json").read_text())


def _write_journal(project: Path, events: list[dict]) -> None:
    path = project / ".gpufleet" / STACK / "journal.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({**e, "seq": i}) + "\n" for i, e in enumerate(events, start=1)))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("ref") / "p")
    done = _cli(project)
    assert done.returncode == 0, done.stderr[-3000:]
    return project, done.stdout, snapshot(project, STACK)


def fresh(tmp_path: Path, ref_project: Path, name: str) -> Path:
    project = make_project(tmp_path / name)
    seed_program_cache(ref_project, project, STACK)
    return project


def test_the_local_rollout_journals_displays_and_reports_the_three_stages(reference):
    project, stdout, _ = reference
    assert _stage_events(project) == [(s, to) for s in STAGES for to in ("started", "passed")]
    shown = [line.split()[:3] for line in stdout.splitlines() if line.startswith("acceptance ")]
    assert shown == [["acceptance", s, to] for s in STAGES for to in ("running", "passed")]
    rep = _report(project)
    assert [(a["stage"], a["status"], a["verdict"], a["attempts"]) for a in rep["acceptance"]] == [
        (s, "passed", "PASS", 1) for s in STAGES]
    assert all(a["seconds"] > 0 and a["timing"] == "modelled" and a["checks"] for a in rep["acceptance"])
    reports = project / "reports" / STACK
    cases = [c for c in ET.parse(reports / "rollout-junit.xml").getroot().iter("testcase")
             if c.get("classname", "").startswith("acceptance.")]
    assert len(cases) == sum(len(a["checks"]) for a in rep["acceptance"])
    assert {c.get("classname") for c in cases} == {f"acceptance.{s}" for s in STAGES}
    assert "## Acceptance" in (reports / "rollout.md").read_text()
    assert "Acceptance" in (reports / "rollout.html").read_text()


def test_killed_between_the_smoke_start_and_its_verdict_reruns_only_the_smoke(reference, tmp_path):
    ref_project, _, ref = reference
    at = next(e["seq"] for e in _events(ref_project)
              if e["type"] == "acceptance" and e["stage"] == "smoke" and e["to"] == "started")
    project = fresh(tmp_path, ref_project, "killed")
    killed = _cli(project, env={journal_mod.KILL_ENV: str(at)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert journal_state(project, STACK).acceptance["smoke"].status.value == "running"
    result = rollout(project, STACK, "--resume")
    assert result.exit_code == 0, result.output
    assert _stage_events(project) == [("storage", "started"), ("storage", "passed"), ("network", "started"),
                                      ("network", "passed"), ("smoke", "started"), ("smoke", "started"),
                                      ("smoke", "passed")]
    assert [a["attempts"] for a in _report(project)["acceptance"]] == [1, 1, 2]
    assert snapshot(project, STACK) == ref


def _legacy(project: Path) -> list[dict]:
    """Turn the project's journal into one an older gpufleet wrote: the stage verdicts become
    `<state_dir>/acceptance/<stage>.json` files, the stage events leave the journal."""
    sd = project / ".gpufleet" / STACK
    events = _events(project)
    started = {e["stage"]: e for e in events if e["type"] == "acceptance" and e["to"] == "started"}
    for e in events:
        if e["type"] == "acceptance" and e["to"] != "started":
            s = started[e["stage"]]
            (sd / "acceptance" / f"{e['stage']}.json").write_text(json.dumps({
                "stage": e["stage"], "at": e["at"], "bundle": str(sd / s["bundle"]), "nodes": s["nodes"],
                "pairs": s["pairs"], "outcome": e["outcome"]}))
    kept = [e for e in events if e["type"] != "acceptance"]
    _write_journal(project, kept)
    return kept


def test_an_old_style_journal_mid_rollout_resumes_without_collecting_again(reference, tmp_path):
    ref_project, _, ref = reference
    project = fresh(tmp_path, ref_project, "old")
    first = rollout(project, STACK, "--until-batch", "1")
    assert first.exit_code == 0, first.output
    assert [s for s, _ in _stage_events(project)] == ["storage", "storage", "network", "network"]
    _legacy(project)
    bundles = sorted(p.relative_to(project) for p in (project / ".gpufleet" / STACK / "acceptance").rglob("*"))
    result = rollout(project, STACK, "--resume")
    assert result.exit_code == 0, result.output
    events = [e for e in _events(project) if e["type"] == "acceptance"]
    assert [(e["stage"], e["to"], bool(e.get("imported"))) for e in events] == [
        ("storage", "passed", True), ("network", "passed", True), ("smoke", "started", False),
        ("smoke", "passed", False)]
    after = sorted(p.relative_to(project) for p in (project / ".gpufleet" / STACK / "acceptance").rglob("*"))
    assert [p for p in after if p not in bundles and "smoke" not in str(p)] == []  # nothing collected again
    rep = _report(project)
    assert [a["status"] for a in rep["acceptance"]] == ["passed"] * 3
    assert rep["acceptance"][0]["imported_from"].endswith("acceptance/storage.json")
    assert snapshot(project, STACK) == ref


def _failed_storage_outcome(project: Path) -> dict:
    spec = load_stack(STACK, project / "stacks")
    plan, sku = build_plan(spec), catalog.get(spec.cluster.instance_type)
    files = S.storage_outputs(spec.storage, plan.storage, sku, spec.acceptance, random.Random(1),
                              S.AcceptanceFaults(slow_storage=0.3))
    checks = A.storage_checks(bundle(files), spec.storage, plan.storage, sku, spec.acceptance)
    return A.stage_outcome("storage", checks).model_dump(mode="json")


def test_an_old_style_halt_on_storage_is_reproduced_then_lifted_by_retry_stage(reference, tmp_path):
    ref_project, _, ref = reference
    project = fresh(tmp_path, ref_project, "halted")
    start = _events(ref_project)[0]
    assert start["type"] == "rollout" and start["to"] == "started"
    reason = "acceptance storage failed (storage-write-slow): sequential write is slow"
    _write_journal(project, [start, {**start, "to": "halted", "reason": reason}])
    sd = project / ".gpufleet" / STACK
    (sd / "acceptance").mkdir(parents=True)
    at = (datetime.fromisoformat(start["at"]) + timedelta(seconds=3)).isoformat()
    (sd / "acceptance" / "storage.json").write_text(json.dumps({
        "stage": "storage", "at": at, "bundle": str(sd / "acceptance" / "bundles" / "storage"), "nodes": [],
        "pairs": [], "outcome": _failed_storage_outcome(project)}))

    again = rollout(project, STACK)
    assert again.exit_code == 3, again.output
    assert "--retry-stage storage" in again.output
    rep = _report(project)
    assert rep["status"] == "halted" and rep["acceptance"][0]["status"] == "failed"
    assert "storage-write-slow" in rep["acceptance"][0]["reason_codes"]
    assert [a["status"] for a in rep["acceptance"][1:]] == ["not-run", "not-run"]

    wrong = rollout(project, STACK, "--retry-stage", "network")
    assert wrong.exit_code == 2 and "has not failed" in wrong.output

    retried = rollout(project, STACK, "--retry-stage", "storage")
    assert retried.exit_code == 0, retried.output
    rep = _report(project)
    assert rep["status"] == "complete" and [a["status"] for a in rep["acceptance"]] == ["passed"] * 3
    assert rep["acceptance"][0]["attempts"] == 2
    assert rep["acceptance"][0]["earlier"][0]["reason_codes"][0] == "storage-write-slow"
    assert snapshot(project, STACK) == ref


def test_retry_stage_without_a_journal_is_refused_before_anything_runs(tmp_path):
    project = make_project(tmp_path / "empty")
    refused = rollout(project, STACK, "--retry-stage", "storage")
    assert refused.exit_code == 2, refused.output
    assert "no rollout journal" in refused.output and "nothing to retry" in refused.output
    assert "starting a new rollout" not in refused.output
    assert not (project / ".gpufleet" / STACK / "journal.jsonl").exists()


def test_the_stack_seeds_acceptance_faults_and_a_slot_the_plan_lacks_is_refused_before_anything_runs(tmp_path):
    """`gpufleet:simulator.acceptance`: a slow file system halts at storage (exit 3); an unknown slot
    is a plan ERROR (exit 2) and nothing is written."""
    import yaml

    def seeded(name: str, faults: dict) -> Path:
        project = make_project(tmp_path / name)
        path = project / "stacks" / f"Pulumi.{STACK}.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["config"]["gpufleet:simulator"]["acceptance"] = faults
        path.write_text(yaml.safe_dump(doc))
        return project

    slow = seeded("slow", {"slowStorage": 0.3})
    halted = rollout(slow, STACK)
    assert halted.exit_code == 3 and "acceptance storage failed (storage-write-slow" in halted.output
    assert _stage_events(slow) == [("storage", "started"), ("storage", "failed")]

    unknown = seeded("unknown", {"divergingNode": "nosuch-slot"})
    refused = rollout(unknown, STACK)
    assert refused.exit_code == 2 and "SIM_FAULT_SLOT_UNKNOWN" in refused.output and "nosuch-slot" in refused.output
    assert not (unknown / ".gpufleet").exists()
