"""AWS program review A2 in the CI `gpufleet init` writes: a Kubernetes stack's rollout jobs run on
the in-VPC runner a repository variable names (its EKS endpoint is private), and with none named
they stop at once with an error instead of failing inside `pulumi up` on a GitHub-hosted runner."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from gpufleet import init_ci

TEMPLATE = Path(init_ci.__file__).resolve().parent / "_template" / "stacks"
CHECK = "A runner inside the VPC (the EKS endpoint is private)"


def _facts(stack: str, **pool) -> init_ci.StackFacts:
    doc = yaml.safe_load((TEMPLATE / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["gpufleet:pool"].update(pool)
    return init_ci.stack_facts(stack, yaml.safe_dump(doc))


def _jobs(*stacks: init_ci.StackFacts) -> dict:
    return yaml.safe_load(init_ci.pipeline(list(stacks)))["jobs"]


def test_a2_the_stack_file_says_which_stacks_talk_to_an_eks_endpoint():
    prod, dev = _facts("prod"), _facts("dev")
    assert prod.kubernetes and not prod.public_endpoint and not dev.kubernetes
    assert _facts("prod", endpointPublicAccessCidrs=["3.5.140.2/32"]).public_endpoint
    assert prod.runner_variable == "GPUFLEET_RUNNER_PROD"
    assert init_ci.StackFacts("my-inference.2").runner_variable == "GPUFLEET_RUNNER_MY_INFERENCE_2"


def test_a2_a_kubernetes_stack_s_rollout_runs_on_its_in_vpc_runner():
    prod = _facts("prod")
    jobs = _jobs(_facts("dev"), prod)
    assert jobs["rollout-dev-1"]["runs-on"] == "ubuntu-24.04"
    assert not any(s.get("name") == CHECK for s in jobs["rollout-dev-1"]["steps"])
    parts = [jobs[j] for j in init_ci.part_job_ids(prod)]
    assert parts
    for job in parts:
        assert job["runs-on"] == "${{ vars.GPUFLEET_RUNNER_PROD || vars.GPUFLEET_RUNNER || 'ubuntu-24.04' }}"
        first = job["steps"][0]
        assert first["name"] == CHECK, "the check runs before anything else"
        assert first["if"] == "${{ vars.GPUFLEET_RUNNER_PROD == '' && vars.GPUFLEET_RUNNER == '' }}"


def test_a2_with_no_runner_named_the_job_stops_with_what_to_set(tmp_path):
    step = _jobs(_facts("prod"))["rollout-prod-1"]["steps"][0]
    out = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path)
    assert out.returncode == 2
    assert "::error::" in out.stdout and "GPUFLEET_RUNNER_PROD" in out.stdout
    assert "endpointPublicAccessCidrs" in out.stdout


def test_a2_a_stack_with_public_cidrs_needs_no_in_vpc_runner():
    jobs = _jobs(_facts("prod", endpointPublicAccessCidrs=["3.5.140.2/32"]))
    assert not any(s.get("name") == CHECK for j in jobs.values() for s in j.get("steps", []))
    assert "GPUFLEET_RUNNER_PROD" in jobs["rollout-prod-1"]["runs-on"], "a runner may still be named"


def test_a2_the_header_documents_the_runner_variables():
    text = init_ci.pipeline([_facts("prod")])
    assert "GPUFLEET_RUNNER_<STACK>" in text.split("name: gpufleet", 1)[0]
