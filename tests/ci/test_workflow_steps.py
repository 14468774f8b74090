"""The templates' shell steps, run as GitHub runs them (`bash --noprofile --norc -eo pipefail`), against
the real `gpufleet` on the simulated `local` stack in a project made by `gpufleet init`.

They prove what the YAML alone cannot: the commands and options exist, the report files the
steps read are the ones the commands write, and the exit codes decide as the pipeline promises.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # the real gpufleet CLI in subprocesses: validate, rollout, drift, 4-18 s each
BIN = Path(sys.executable).parent


def _steps(workflow: str, job: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / workflow).read_text(encoding="utf-8"))
    return doc["jobs"][job]["steps"]


def _step(steps: list[dict[str, Any]], *, name: str | None = None, id_: str | None = None) -> dict[str, Any]:
    return next(s for s in steps if (id_ and s.get("id") == id_) or (name and s.get("name") == name))


def _run(step: dict[str, Any], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = cwd / ".step.sh"
    script.write_text(step["run"], encoding="utf-8")
    given = {k: v for k, v in step.get("env", {}).items() if "${{" not in str(v)}  # the rest GitHub fills in: `env`
    missing = {k for k in step.get("env", {}) if k not in given and k not in env}
    assert not missing, f"the test must give {missing}"
    full = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **given, **env}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    out = subprocess.run([str(BIN / "gpufleet"), "init", str(tmp_path / "p"), "--stack", "local"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return tmp_path / "p"


def test_pull_request_step_writes_the_plan_summary(project: Path, tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    step = _step(_steps("rollout.yml", "check"), id_="offline")
    out = _run(step, project, {"STACK": "local", "GITHUB_STEP_SUMMARY": str(summary)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = summary.read_text(encoding="utf-8")
    assert text == (project / "plan-summary-local.md").read_text(encoding="utf-8")  # what the PR comment posts
    assert text.startswith("## gpufleet: stack `local`")
    for title in ("gpufleet validate: exit 0", "gpufleet plan: exit 0", "policy pack rules): exit 0"):
        assert title in text
    assert "125 x 8 GPUs" in text and text.count("<details>") == 3  # folded when they pass


def test_pull_request_step_fails_and_shows_a_bad_stack(project: Path, tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    (project / "stacks" / "Pulumi.broken.yaml").write_text("config:\n  gpufleet:cluster:\n    nodes: many\n",
                                                          encoding="utf-8")
    step = _step(_steps("rollout.yml", "check"), id_="offline")
    out = _run(step, project, {"STACK": "broken", "GITHUB_STEP_SUMMARY": str(summary)})
    assert out.returncode == 2, out.stdout[-2000:]
    text = summary.read_text(encoding="utf-8")
    assert "gpufleet validate: exit 2" in text and "<details open>" in text
    assert "Pulumi.broken.yaml" in text  # the error names the file


def test_nightly_steps_fail_on_drift_after_writing_both_reports(project: Path, tmp_path: Path) -> None:
    inject = subprocess.run([str(BIN / "gpufleet"), "sim", "inject", "-s", "local", "--orphans", "1"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    assert inject.returncode == 0, inject.stderr
    summary = tmp_path / "step-summary.md"
    env = {"STACK": "local", "GITHUB_STEP_SUMMARY": str(summary)}
    steps = _steps("nightly.yml", "drift")
    outcome = {}
    for id_ in ("drift", "audit"):  # continue-on-error steps: their outcome, not the job, records a failure
        outcome[id_] = "success" if _run(_step(steps, id_=id_), project, env).returncode == 0 else "failure"
    assert outcome == {"drift": "failure", "audit": "success"}
    assert _run(_step(steps, name="Reports to the step summary"), project, env).returncode == 0
    text = summary.read_text(encoding="utf-8")
    reports = project / "reports" / "local"
    assert (reports / "drift.md").read_text(encoding="utf-8") in text
    assert (reports / "audit.md").read_text(encoding="utf-8") in text
    assert {"drift.json", "drift-junit.xml", "drift.html", "audit.json", "audit-junit.xml"} <= {
        p.name for p in reports.iterdir()}  # what the artifact upload takes
    last = steps[-1]
    assert "steps.drift.outcome != 'success'" in last["if"]
    final = _run(last, project, {**env, "DRIFT": outcome["drift"], "AUDIT": outcome["audit"]})
    assert final.returncode == 4 and "drift: failure" in final.stdout


def test_drift_exits_4_so_the_step_fails(project: Path) -> None:
    """The nightly step fails on exit 4 as on any other: check the code the CLI gives for drift itself."""
    subprocess.run([str(BIN / "gpufleet"), "sim", "inject", "-s", "local", "--orphans", "2"], cwd=project,
                   check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(BIN / "gpufleet"), "drift", "-s", "local", "--layer", "cloud", "--out", "r"],
                         cwd=project, capture_output=True, text=True, timeout=600)
    assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize("job", ["dev", "prod"])
def test_rollout_steps_resume_a_fresh_stack_and_report(project: Path, tmp_path: Path, job: str) -> None:
    """`--resume` on a stack with no journal starts one; the summary step reads the report the rollout wrote.
    The simulated stack stands in for the job's own (STACK given here, as the job's env gives it)."""
    summary = tmp_path / "step-summary.md"
    env = {"STACK": "local", "GITHUB_STEP_SUMMARY": str(summary)}
    steps = _steps("rollout.yml", job)
    rollout = next(s for s in steps if "gpufleet rollout" in s.get("run", ""))
    out = _run(rollout, project, env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "starting a new rollout" in out.stderr
    assert _run(_step(steps, name="Report to the step summary"), project, env).returncode == 0
    assert summary.read_text(encoding="utf-8") == (project / "reports" / "local" / "rollout.md").read_text(
        encoding="utf-8")
