"""The pipeline `init` writes confirms its real rollouts with `--yes` (issue 23 item 2): a runner
has no terminal, so without it every deploy part would refuse (exit 2); the approval is the
GitHub environment's required reviewers. The simulated check rollout needs none (never asked)."""

from __future__ import annotations

import re

import yaml

from gpufleet import init_ci


def _runs(job: dict) -> list[str]:
    return [s["run"] for s in job.get("steps", []) if "run" in s]


def test_every_real_rollout_in_the_generated_pipeline_passes_yes():
    stacks = [init_ci.StackFacts("local", simulated=True, sim_pool=True), init_ci.StackFacts("dev"),
              init_ci.StackFacts("prod", s3_journal=True)]
    doc = yaml.safe_load(init_ci.workflow_files(stacks)[init_ci.WORKFLOW])
    deploy = {name: job for name, job in doc["jobs"].items() if name.startswith("rollout-")}
    assert {n.split("-")[1] for n in deploy} == {"dev", "prod"}
    for name, job in deploy.items():
        calls = [line for run in _runs(job) for line in run.splitlines() if re.search(r"\bgpufleet rollout\b", line)]
        assert calls and all("--yes" in line for line in calls), (name, calls)
    check = [line for run in _runs(doc["jobs"]["check"]) for line in run.splitlines() if "gpufleet rollout" in line]
    assert check and not any("--yes" in line for line in check)  # simulated: the quickstart's command as it is
