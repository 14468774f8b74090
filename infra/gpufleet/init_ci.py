"""The GitHub Actions pipeline `gpufleet init` writes into a project, for that project's stacks.

The repository's own `.github/workflows/rollout.yml` names `dev` and `prod` and runs this
repository's tests; copied into a project made by `init` it failed (a stack the project lacks, an
empty `pytest` that exits 5 and blocked the deploy). This module writes the project's own pipeline
instead, from the stacks it has:

- pull requests and pushes: per stack `gpufleet validate`, `plan`, `preview --offline` (the
  resource graph and the policy pack's rules), the summary in the step summary and one PR comment;
  a simulated stack (`local`, `local-slurm`) is also rolled out in the simulator;
- merge to main: each deployed stack rolled out in the order init met them (dev first), each
  behind its GitHub environment (required reviewers there are the approval). GitHub ends a hosted
  job at 6 h and the deployer role's credentials last at most its IAM `MaxSessionDuration`, yet
  a 1,000-GPU rollout is modelled at about 6 h: so a stack whose journal and lock are in S3 and
  DynamoDB rolls out in parts of at most PART_MINUTES, each `gpufleet rollout --resume` under
  `timeout --signal=INT` (the interrupt unwinds the lock; the next part, on a fresh runner,
  resumes from the journal). A stack with a local journal runs in one part: its journal lives
  on the runner.
- a Kubernetes stack's rollout jobs run where its EKS endpoint answers: `pulumi up` installs the
  Helm releases and objects through it and the rollout talks to it, and it is private unless the
  stack names `pool.endpointPublicAccessCidrs`. Their `runs-on` is the repository variable
  `GPUFLEET_RUNNER_<STACK>` (else `GPUFLEET_RUNNER`): the label of a self-hosted runner in the
  stack's management subnet. With a private endpoint and neither set, the job stops at once with
  an error instead of failing hours into `pulumi up` on a GitHub-hosted runner outside the VPC.

Pure: `workflow_files(stacks)` returns the files; `stack_facts` reads what it needs from a stack
file's YAML without validating it (a stack with errors still gets its checks, which then fail).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import yaml

WORKFLOW = ".github/workflows/gpufleet.yml"
NIGHTLY = ".github/workflows/gpufleet-nightly.yml"
SETUP_ACTION = ".github/actions/setup-gpufleet/action.yml"
PART_MINUTES = 320  # one part of a rollout: under the job's limit, with room for setup and the report
JOB_MINUTES = 345  # GitHub-hosted jobs end at 360
CREDENTIAL_SECONDS = 21_600  # 6 h: the role's MaxSessionDuration must be at least this (default 3,600)
PARTS = 4  # parts of an S3-journaled rollout: 4 x 320 min; the 1,000-GPU prod stack is modelled at 2


@dataclass(frozen=True)
class StackFacts:
    """What the pipeline needs to know of one stack."""

    name: str
    simulated: bool = False
    s3_journal: bool = False  # rollout.stateBackend.type s3: a fresh runner can resume it
    sim_pool: bool = False  # pool.type sim: a rollout needs nothing but gpufleet (local-slurm needs a Slurm)
    kubernetes: bool = False  # pool.type kubernetes: the rollout talks to the EKS endpoint
    public_endpoint: bool = False  # pool.endpointPublicAccessCidrs named: the endpoint also answers those sources

    @property
    def runner_variable(self) -> str:
        """The repository variable naming this stack's in-VPC runner label."""
        return f"GPUFLEET_RUNNER_{_env_suffix(self.name)}"

    @property
    def deployed(self) -> bool:
        return not self.simulated


def stack_facts(name: str, text: str | bytes) -> StackFacts:
    """Read from a stack file's YAML (not validated: `gpufleet validate` in the pipeline says what is wrong)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return StackFacts(name)
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        return StackFacts(name)
    rollout = config.get("gpufleet:rollout")
    backend = rollout.get("stateBackend") if isinstance(rollout, dict) else None
    pool = config.get("gpufleet:pool")
    pool_type = pool.get("type") if isinstance(pool, dict) else None
    return StackFacts(name, simulated="gpufleet:simulator" in config,
                      s3_journal=isinstance(backend, dict) and backend.get("type") == "s3",
                      sim_pool=pool_type == "sim", kubernetes=pool_type == "kubernetes",
                      public_endpoint=isinstance(pool, dict) and pool_type == "kubernetes"
                      and bool(pool.get("endpointPublicAccessCidrs")))


def ordered(stacks: Sequence[StackFacts]) -> list[StackFacts]:
    """`dev` first (it deploys on every merge), the rest by name; each later stack waits for the one before."""
    return sorted(stacks, key=lambda s: (s.name != "dev", s.name))


def workflow_files(stacks: Sequence[StackFacts]) -> dict[str, bytes]:
    """The pipeline, its nightly drift check (when a stack is deployed) and the setup action."""
    stacks = ordered(stacks)
    files = {WORKFLOW: pipeline(stacks).encode(), SETUP_ACTION: SETUP_ACTION_TEXT.encode()}
    if any(s.deployed for s in stacks):
        files[NIGHTLY] = nightly([s for s in stacks if s.deployed]).encode()
    return files


def _env_suffix(name: str) -> str:
    return name.upper().replace("-", "_").replace(".", "_")


SUMMARY_SCRIPT = """\
set +e
summary="plan-summary-$STACK.md"
failed=0
section() {  # section TITLE COMMAND...: the command's output as a folded block; remembers a failure
  local title=$1; shift
  "$@" > out.txt 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || failed=$rc
  {
    echo "<details$([ "$rc" -ne 0 ] && echo ' open')><summary>$title: exit $rc</summary>"
    echo
    echo '```'
    head -c 20000 out.txt
    echo '```'
    echo "</details>"
  } >> "$summary"
  cat out.txt
}
echo "## gpufleet: stack \\`$STACK\\`" > "$summary"
section "gpufleet validate" gpufleet validate -s "$STACK"
section "gpufleet plan" gpufleet plan -s "$STACK"
section "gpufleet preview --offline (resource graph and policy pack rules)" \\
  gpufleet preview -s "$STACK" --offline
cat "$summary" >> "$GITHUB_STEP_SUMMARY"
exit "$failed"
"""

# One part of a rollout: exit 124 from `timeout` is "this part's time is up, the next part resumes".
# A rollout that does not stop on the interrupt within KILL_AFTER is killed (137): its journal is
# crash-safe, but its lock stays held by a runner that is gone, so the next part takes it
# (--force-unlock, only then: the part before it in this pipeline was the holder). `--yes`: a
# runner has no terminal, and the environment's required reviewers were the confirmation.
PART_SCRIPT = """\
set +e
unlock=()
if [ "${PREVIOUS_KILLED:-false}" = "true" ]; then
  unlock=(--force-unlock)
fi
timeout --signal=INT --kill-after="${KILL_AFTER:-2m}" "${PART_MINUTES}m" gpufleet rollout -s "$STACK" --resume --yes "${unlock[@]}"
rc=$?
set -e
if [ "$rc" -eq 137 ]; then
  echo "killed=true" >> "$GITHUB_OUTPUT"
  rc=124
fi
if [ "$rc" -eq 0 ]; then
  echo "done=true" >> "$GITHUB_OUTPUT"
elif [ "$rc" -eq 124 ] && [ "$LAST_PART" != "true" ]; then
  echo "done=false" >> "$GITHUB_OUTPUT"
  echo "::notice::rollout of $STACK not finished after ${PART_MINUTES} min: the next part resumes it"
elif [ "$rc" -eq 124 ]; then
  echo "::error::rollout of $STACK not finished in its last part: run this workflow again, it resumes"
  exit 1
else
  exit "$rc"
fi
"""


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


def _check_job(stacks: Sequence[StackFacts]) -> str:
    # `simulate`: rolled out in the simulator on every check, where the pool is the simulator's too
    # (a simulated Slurm stack, local-slurm, needs `gpufleet pool up` and Slurm on the runner: checks only)
    rows = "".join(f"          - stack: {s.name}\n            simulate: {str(s.simulated and s.sim_pool).lower()}\n"
                   for s in stacks)
    return f"""\
  check:
    name: check ${{{{ matrix.stack }}}}
    runs-on: ubuntu-24.04
    timeout-minutes: 60
    strategy:
      fail-fast: false
      matrix:
        include:
{rows}    steps:
      - uses: actions/checkout@v4
      - uses: ./.github/actions/setup-gpufleet
        with:
          package: ${{{{ env.GPUFLEET_PACKAGE }}}}
      - name: Validate, plan and preview offline
        id: offline
        env:
          STACK: ${{{{ matrix.stack }}}}
        run: |
{_indent(SUMMARY_SCRIPT, 10)}      - name: Roll out in the simulator
        id: simulated
        if: ${{{{ matrix.simulate }}}}
        env:
          STACK: ${{{{ matrix.stack }}}}
        run: gpufleet rollout -s "$STACK"
      - name: Keep the summary for the PR comment
        if: ${{{{ always() && github.event_name == 'pull_request' }}}}
        uses: actions/upload-artifact@v4
        with:
          name: plan-summary-${{{{ matrix.stack }}}}
          path: plan-summary-${{{{ matrix.stack }}}}.md
          if-no-files-found: ignore
          overwrite: true  # a re-run replaces its own summary

  comment:
    name: post the plan summary
    if: ${{{{ always() && github.event_name == 'pull_request' }}}}
    needs: check
    runs-on: ubuntu-24.04
    timeout-minutes: 5
    permissions:
      pull-requests: write
    steps:
      - uses: actions/download-artifact@v4
        with:
          pattern: plan-summary-*
          merge-multiple: true
      - name: One comment per pull request, edited on every push
        env:
          GH_TOKEN: ${{{{ github.token }}}}
          GH_REPO: ${{{{ github.repository }}}}
          PR: ${{{{ github.event.pull_request.number }}}}
        run: |
          shopt -s nullglob
          files=(plan-summary-*.md)
          [ "${{#files[@]}}" -gt 0 ] || {{ echo "no plan summary to post"; exit 0; }}
          cat "${{files[@]}}" | head -c 60000 > comment.md
          gh pr comment "$PR" --body-file comment.md --edit-last --create-if-none
"""


def part_job_ids(stack: StackFacts) -> list[str]:
    parts = PARTS if stack.s3_journal else 1
    return [f"rollout-{stack.name}-{i}" for i in range(1, parts + 1)]


HOSTED_RUNNER = "ubuntu-24.04"


def _runs_on(stack: StackFacts) -> str:
    """A Kubernetes stack's rollout runs on its in-VPC runner (the stack's variable, then the shared
    one); every other stack, and a Kubernetes stack with neither set, on a GitHub-hosted runner."""
    if not stack.kubernetes:
        return HOSTED_RUNNER
    return f"${{{{ vars.{stack.runner_variable} || vars.GPUFLEET_RUNNER || '{HOSTED_RUNNER}' }}}}"


def _runner_check(stack: StackFacts) -> str:
    """A private endpoint and no in-VPC runner named: stop before anything is bought."""
    if not stack.kubernetes or stack.public_endpoint:
        return ""
    return f"""\
      - name: A runner inside the VPC (the EKS endpoint is private)
        if: ${{{{ vars.{stack.runner_variable} == '' && vars.GPUFLEET_RUNNER == '' }}}}
        run: |
          echo "::error::stack {stack.name} has a private EKS endpoint: pulumi up and the rollout must run inside its VPC. Set the repository variable {stack.runner_variable} (or GPUFLEET_RUNNER) to the label of a self-hosted runner in the stack's management subnet, or name this CI's egress CIDR in gpufleet:pool.endpointPublicAccessCidrs"
          exit 2
"""


def _rollout_jobs(stack: StackFacts, after: list[str]) -> str:
    ids = part_job_ids(stack)
    out = []
    on_main = "github.event_name != 'pull_request' && github.ref == 'refs/heads/main' && vars.GPUFLEET_DEPLOY == 'true'"
    for i, job_id in enumerate(ids, 1):
        first, last = i == 1, i == len(ids)
        if first and after:
            needs = "[" + ", ".join(after) + "]"
            condition = (f"!cancelled() && {on_main} && !contains(needs.*.result, 'failure') "
                         "&& contains(needs.*.outputs.done, 'true')")
        elif first:
            needs, condition = "check", on_main
        else:
            needs, condition = ids[i - 2], f"needs.{ids[i - 2]}.outputs.done == 'false'"
        previous_killed = (f"\n      PREVIOUS_KILLED: ${{{{ needs.{ids[i - 2]}.outputs.killed == 'true' }}}}"
                           if not first else "")
        # Required reviewers on the stack's environment approve part 1; later parts run in
        # `<stack>-resume` (no reviewers) so an approved rollout is not held for approval again.
        environment = stack.name if first else f"{stack.name}-resume"
        title = f"roll out {stack.name}" + (f" (part {i} of {len(ids)})" if len(ids) > 1 else "")
        validate = """      - name: Live checks (quota, capacity, offering)
        run: gpufleet validate -s "$STACK" --cloud
""" if first else ""
        out.append(f"""\
  {job_id}:
    name: {title}
    if: ${{{{ {condition} }}}}
    needs: {needs}
    runs-on: {_runs_on(stack)}
    timeout-minutes: {JOB_MINUTES}
    environment: {environment}
    concurrency:
      group: gpufleet-rollout-{stack.name}
      cancel-in-progress: false
    permissions:
      contents: read
      id-token: write
    outputs:
      done: ${{{{ steps.rollout.outputs.done }}}}
      killed: ${{{{ steps.rollout.outputs.killed }}}}
    env:
      STACK: {stack.name}
      PART_MINUTES: "{PART_MINUTES}"
      KILL_AFTER: 2m
      LAST_PART: "{str(last).lower()}"{previous_killed}
      PULUMI_ACCESS_TOKEN: ${{{{ secrets.PULUMI_ACCESS_TOKEN }}}}
      PULUMI_BACKEND_URL: ${{{{ vars.PULUMI_BACKEND_URL }}}}
      PULUMI_CONFIG_PASSPHRASE: ${{{{ secrets.PULUMI_CONFIG_PASSPHRASE }}}}
    steps:
{_runner_check(stack)}      - uses: actions/checkout@v4
      - uses: ./.github/actions/setup-gpufleet
        with:
          package: ${{{{ env.GPUFLEET_PACKAGE }}}}
      - uses: pulumi/actions@v6  # installs the Pulumi CLI the rollout drives
      - uses: aws-actions/configure-aws-credentials@v4
        with:
          role-to-assume: ${{{{ vars.AWS_ROLE_ARN }}}}
          aws-region: ${{{{ vars.AWS_REGION }}}}
          role-duration-seconds: {CREDENTIAL_SECONDS}  # the role's MaxSessionDuration must allow it
{validate}      - name: gpufleet rollout --resume (one part)
        id: rollout
        run: |
{_indent(PART_SCRIPT, 10)}      - name: Report to the step summary
        if: ${{{{ always() }}}}
        run: cat "reports/$STACK/rollout.md" >> "$GITHUB_STEP_SUMMARY" 2>/dev/null || echo "no rollout report"
      - uses: actions/upload-artifact@v4
        if: ${{{{ always() }}}}
        with:
          name: rollout-{stack.name}-part{i}-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}
          path: reports/{stack.name}/
          if-no-files-found: warn
""")
    return "\n".join(out)


def pipeline(stacks: Sequence[StackFacts]) -> str:
    """The pull-request checks and the rollouts, as YAML text with the comments a user reads."""
    stacks = ordered(stacks)
    deployed = [s for s in stacks if s.deployed]
    names = ", ".join(s.name for s in stacks)
    header = f"""\
# gpufleet's pipeline for this project, written by `gpufleet init` for its stacks: {names}.
# `gpufleet init . -s STACK` adds a stack and shows how this file would change
# (`--force {WORKFLOW}` takes gpufleet's version).
#   pull request, push -> per stack: gpufleet validate, plan, preview --offline (the resource graph and
#                         the policy pack's rules, exit 3 on a mandatory violation); simulated stacks
#                         are also rolled out in the simulator
#   merge to main      -> each deployed stack rolled out in turn ({", ".join(s.name for s in deployed) or "none"}),
#                         behind its GitHub environment (required reviewers there are the approval)
# A stack whose journal and lock are in S3/DynamoDB (rollout.stateBackend type s3) rolls out in up to
# {PARTS} parts of {PART_MINUTES} minutes: each part resumes the journal on a fresh runner, later parts run in
# the environment `<stack>-resume` (no reviewers). GitHub ends a hosted job at 6 h; the deployer role's
# credentials last role-duration-seconds ({CREDENTIAL_SECONDS}), which its IAM MaxSessionDuration must allow
# (`aws iam update-role --role-name ROLE --max-session-duration {CREDENTIAL_SECONDS}`; the default is 3600).
# The role trusts this repository's OIDC subjects `environment:<stack>` and `environment:<stack>-resume`.
# A Kubernetes stack's rollout runs on the self-hosted runner labelled by the repository variable
# GPUFLEET_RUNNER_<STACK> (else GPUFLEET_RUNNER), inside the stack's VPC: its EKS endpoint is private
# unless gpufleet:pool.endpointPublicAccessCidrs names this CI's egress CIDR.
# Deploys run only where the repository variable GPUFLEET_DEPLOY is `true`.
name: gpufleet
on:
  pull_request:
  push:
    branches: [main]
  workflow_dispatch:
permissions:
  contents: read
env:
  GPUFLEET_PACKAGE: ${{{{ vars.GPUFLEET_PACKAGE }}}}
jobs:
"""
    jobs = [_check_job(stacks)]
    after: list[str] = []
    for stack in deployed:
        jobs.append(_rollout_jobs(stack, after))
        after = part_job_ids(stack)
    return header + "\n".join(jobs)


def nightly(stacks: Sequence[StackFacts]) -> str:
    """Drift and audit of every deployed stack, nightly, failing after the reports are uploaded."""
    rows = "".join(f"          - stack: {s.name}\n            role: AWS_DRIFT_ROLE_ARN_{_env_suffix(s.name)}\n"
                   for s in stacks)
    return f"""\
# Nightly drift and version audit of this project's deployed stacks ({", ".join(s.name for s in stacks)}),
# written by `gpufleet init`. The job fails on drift or a mismatch (exit 4) or a layer that could not
# run (exit 1), after uploading both reports. Runs only where GPUFLEET_DEPLOY is `true`; the software
# layer reaches the nodes: run it on a self-hosted runner in the VPC (variable GPUFLEET_RUNNER).
name: gpufleet-nightly
on:
  schedule:
    - cron: "17 3 * * *"  # 03:17 UTC, off the top of the hour
  workflow_dispatch:
permissions:
  contents: read
env:
  GPUFLEET_PACKAGE: ${{{{ vars.GPUFLEET_PACKAGE }}}}
jobs:
  drift:
    name: drift and audit ${{{{ matrix.stack }}}}
    if: ${{{{ vars.GPUFLEET_DEPLOY == 'true' }}}}
    runs-on: ${{{{ vars.GPUFLEET_RUNNER || 'ubuntu-24.04' }}}}
    timeout-minutes: 120
    strategy:
      fail-fast: false
      matrix:
        include:
{rows}    concurrency:  # never beside a rollout of the same stack: it would read a half-done batch as drift
      group: gpufleet-rollout-${{{{ matrix.stack }}}}
      cancel-in-progress: false
    permissions:
      contents: read
      id-token: write
    env:
      STACK: ${{{{ matrix.stack }}}}
      PULUMI_ACCESS_TOKEN: ${{{{ secrets.PULUMI_ACCESS_TOKEN }}}}
      PULUMI_BACKEND_URL: ${{{{ vars.PULUMI_BACKEND_URL }}}}
      PULUMI_CONFIG_PASSPHRASE: ${{{{ secrets.PULUMI_CONFIG_PASSPHRASE }}}}
    steps:
      - uses: actions/checkout@v4
      - uses: ./.github/actions/setup-gpufleet
        with:
          package: ${{{{ env.GPUFLEET_PACKAGE }}}}
      - uses: pulumi/actions@v6  # installs the Pulumi CLI the cloud layer drives
      - uses: aws-actions/configure-aws-credentials@v4
        with:
          role-to-assume: ${{{{ vars[matrix.role] }}}}
          aws-region: ${{{{ vars.AWS_REGION }}}}
      - name: gpufleet drift
        id: drift
        continue-on-error: true
        run: gpufleet drift -s "$STACK" --out "reports/$STACK"
      - name: gpufleet audit
        id: audit
        continue-on-error: true
        run: gpufleet audit -s "$STACK" --out "reports/$STACK"
      - name: Reports to the step summary
        if: ${{{{ always() }}}}
        run: |
          for name in drift audit; do
            cat "reports/$STACK/$name.md" >> "$GITHUB_STEP_SUMMARY" 2>/dev/null || echo "no $name report"
          done
      - uses: actions/upload-artifact@v4
        if: ${{{{ always() }}}}
        with:
          name: nightly-${{{{ matrix.stack }}}}-${{{{ github.run_id }}}}
          path: reports/${{{{ matrix.stack }}}}/
          if-no-files-found: warn
      - name: Fail on drift, a version mismatch or a layer that could not run
        if: ${{{{ steps.drift.outcome != 'success' || steps.audit.outcome != 'success' }}}}
        env:
          DRIFT: ${{{{ steps.drift.outcome }}}}
          AUDIT: ${{{{ steps.audit.outcome }}}}
        run: |
          echo "::error::drift: $DRIFT, audit: $AUDIT (exit 4 = a difference; see the reports)"
          exit 4
"""


SETUP_ACTION_TEXT = """\
# Installs Python and gpufleet into .venv in the project root and puts it on PATH (written by
# `gpufleet init`). Pulumi.yaml's python runtime then finds gpufleet with the `python3` on PATH.
name: Set up gpufleet
description: Python, gpufleet and its dependencies; gpufleet on PATH.
inputs:
  python-version:
    description: The Python to install (gpufleet needs 3.11 or newer).
    default: "3.11"
  package:
    description: What `pip install` installs (a wheel URL, a git URL, a path); the repository variable GPUFLEET_PACKAGE.
    default: ""
runs:
  using: composite
  steps:
    - uses: actions/setup-python@v5
      with:
        python-version: ${{ inputs.python-version }}
    - name: Install gpufleet
      shell: bash
      env:
        GPUFLEET_PACKAGE: ${{ inputs.package }}
      run: |
        if [ -z "$GPUFLEET_PACKAGE" ]; then
          echo "::error::set the repository variable GPUFLEET_PACKAGE (what pip installs: a wheel or git URL)"
          exit 2
        fi
        python -m venv .venv
        .venv/bin/pip install "$GPUFLEET_PACKAGE"
        echo "$PWD/.venv/bin" >> "$GITHUB_PATH"
"""

