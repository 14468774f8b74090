"""The deployer policy (.github/iam/deployer-policy.json) against what gpufleet really calls.

Each AWS action the code names (boto3, scanned from infra/'s syntax tree) and each action Pulumi's
AWS provider needs for the resource types and invokes the program registers for every stack in
stacks/ (the program run offline under mocks) must be granted; and the policy itself must stay
least-privilege: no wildcard actions, no mutating action on `Resource: *` without a condition,
the stack-tag conditions backed by tags the program really sets, the state backend's bucket,
prefix and table the ones the stacks name.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from gpufleet.program import capture as capture_module
from gpufleet.program.capture import Capture, capture_program
from gpufleet.rollout.backends import DynamoLock, S3JournalStore
from gpufleet.rollout.lock import LockInfo
from gpufleet.spec import available_stacks, load_stack
from gpufleet.tagging import STACK as STACK_TAG
from tests.ci.aws_permissions import (
    PULUMI_INVOKE_ACTIONS,
    PULUMI_TYPE_ACTIONS,
    boto3_calls,
    pulumi_actions,
)
from tests.ci.iam_policy import Policy, is_read

ROOT = Path(__file__).resolve().parents[2]
POLICY_FILE = ROOT / ".github" / "iam" / "deployer-policy.json"
REQUEST_TAG = f"aws:RequestTag/{STACK_TAG}"
RESOURCE_TAG = f"aws:ResourceTag/{STACK_TAG}"
PRINCIPAL_STACK = f"${{aws:PrincipalTag/{STACK_TAG}}}"
INLINE_POLICY_LIMIT = 10_240  # IAM quota: inline policies of one role, whitespace excluded
STACKS = available_stacks()


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.load(POLICY_FILE)


@pytest.fixture(scope="module")
def programs() -> dict[str, tuple[Capture, set[str]]]:
    """Every stack's program with its canary batch deployed, and the invoke tokens it called."""
    out: dict[str, tuple[Capture, set[str]]] = {}
    original = capture_module.GpufleetMocks.call
    for stack in STACKS:
        tokens: set[str] = set()

        def recording_call(self, args, _tokens=tokens):
            _tokens.add(args.token)
            return original(self, args)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(capture_module.GpufleetMocks, "call", recording_call)
            out[stack] = (capture_program(stack, target_batch=1), tokens)
    return out


def _aws_registrations(cap: Capture):
    return [r for r in cap.registrations if not r.options.get("read")]


# --- the policy document on its own -------------------------------------------------------------

def test_policy_has_no_wildcard_actions(policy: Policy) -> None:
    wild = [(s.sid, a) for s in policy.statements for a in s.actions if "*" in a or "?" in a]
    assert not wild, f"spell every action out, no wildcards: {wild}"


def test_mutating_actions_on_any_resource_carry_a_condition(policy: Policy) -> None:
    loose = [(s.sid, a) for s in policy.statements if s.effect == "Allow" and "*" in s.resources
             and not s.condition for a in s.actions if not is_read(a)]
    assert not loose, f"mutating actions on Resource '*' without a condition: {loose}"


def test_tag_conditions_name_the_principals_stack(policy: Policy) -> None:
    """Every stack-tag condition compares with the role's own stack tag, so one document serves every stack."""
    tagged = [s for s in policy.statements if s.condition_values(REQUEST_TAG) or s.condition_values(RESOURCE_TAG)]
    assert tagged
    for s in tagged:
        assert set(s.condition_values(REQUEST_TAG) + s.condition_values(RESOURCE_TAG)) == {PRINCIPAL_STACK}, s.sid
        assert "StringEquals" in s.condition, f"{s.sid}: compare the stack tag with StringEquals"


def test_sids_are_unique_and_the_document_fits_an_inline_policy() -> None:
    doc = json.loads(POLICY_FILE.read_text(encoding="utf-8"))
    sids = [s["Sid"] for s in doc["Statement"]]
    assert len(sids) == len(set(sids))
    assert len(json.dumps(doc, separators=(",", ":"))) <= INLINE_POLICY_LIMIT


def test_the_stack_tag_cannot_be_removed(policy: Policy) -> None:
    deny = [s for s in policy.statements if s.effect == "Deny" and s.matches("ec2:DeleteTags")]
    assert deny and STACK_TAG in deny[0].condition_values("aws:TagKeys")


# --- what the code calls with boto3 -------------------------------------------------------------

def test_the_scan_finds_the_known_boto3_calls() -> None:
    """The scanner itself: calls made directly, through a helper with a bound method, and by name."""
    found = {(c.file, a) for c in boto3_calls(ROOT / "infra") for a in c.actions}
    assert ("infra/gpufleet/validate_cloud.py", "servicequotas:GetAWSDefaultServiceQuota") in found  # bound method
    assert ("infra/gpufleet/validate_cloud.py", "ec2:DescribeInstanceTypes") in found
    assert ("infra/gpufleet/rollout/pulumi_provisioner.py", "ec2:TerminateInstances") in found  # a direct call
    assert ("infra/gpufleet/rollout/backends.py", "s3:ListBucket") in found  # get_paginator("list_objects_v2")
    assert ("infra/gpufleet/rollout/backends.py", "dynamodb:PutItem") in found


def test_the_scan_on_every_way_code_names_an_operation(tmp_path: Path) -> None:
    pkg = tmp_path / "infra"
    pkg.mkdir()
    (pkg / "uses_boto.py").write_text(
        "import boto3\n"
        "def f(session):\n"
        "    ec2 = boto3.client('ec2')\n"
        "    ec2.get_waiter('instance_running').wait()\n"
        "    fsx = session.client('fsx')\n"
        "    fsx.describe_file_systems()\n"
        "    getattr(ec2, 'describe_volumes')()\n"
        "    s3 = boto3.client('s3')\n"
        "    s3.get_paginator('list_objects_v2')\n"
        "    boto3.client('sts').get_caller_identity()\n", encoding="utf-8")
    (pkg / "no_boto.py").write_text("def g(x):\n    return x.describe_instances()\n", encoding="utf-8")
    found = {(c.file, a) for c in boto3_calls(pkg) for a in c.actions}
    # describe_volumes is an operation of both services the file uses: counted for each (the scan
    # cannot tell clients apart, so it asks for more, never less); sts needs no permission
    assert found == {("infra/uses_boto.py", a) for a in (
        "ec2:DescribeInstances", "fsx:DescribeFileSystems", "ec2:DescribeVolumes", "fsx:DescribeVolumes",
        "s3:ListBucket")}


def test_policy_allows_every_boto3_call_in_infra(policy: Policy) -> None:
    missing = sorted({f"{a} ({c.file}:{c.line})" for c in boto3_calls(ROOT / "infra") for a in c.actions
                      if not policy.allows(a)})
    assert not missing, "the deployer policy lacks: " + ", ".join(missing)


def _s3_stacks() -> list[tuple[str, object]]:
    stacks = [(s, load_stack(s).rollout.state_backend) for s in STACKS]
    return [(s, b) for s, b in stacks if b.type == "s3"]


def test_some_stack_uses_the_s3_backend() -> None:
    assert _s3_stacks(), "the backend checks below need a stack with rollout.stateBackend type s3"


@pytest.mark.parametrize(("stack", "backend"), _s3_stacks(), ids=[s for s, _ in _s3_stacks()])
def test_policy_reaches_the_journal_and_lock_the_stack_names(stack: str, backend) -> None:
    """The exact object keys and lock key backends.py builds, on the stack's bucket and table, for the
    role tagged with this stack, and for no other stack's role."""
    policy = Policy.load(POLICY_FILE, {f"aws:PrincipalTag/{STACK_TAG}": stack})
    other = Policy.load(POLICY_FILE, {f"aws:PrincipalTag/{STACK_TAG}": f"not-{stack}"})
    store = S3JournalStore(None, backend.bucket, backend.prefix, stack)
    bucket = f"arn:aws:s3:::{backend.bucket}"
    for key in (f"{store.base}000000000001.json", f"{store.base.rstrip('/')}.archive-20260101T000000Z/x.json"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert policy.allows(action, f"{bucket}/{key}"), (action, key)
            assert not other.allows(action, f"{bucket}/{key}"), (action, key)
    listing = policy.grants("s3:ListBucket", bucket)
    assert listing, f"s3:ListBucket on {bucket}"
    assert all(any(_matches(p, store.base) for p in s.condition_values("s3:prefix")) for s in listing)
    assert not any(_matches(p, store.base) for s in other.grants("s3:ListBucket", bucket)
                   for p in s.condition_values("s3:prefix"))

    lock = DynamoLock(None, backend.lock_table, f"{backend.prefix.strip('/')}/{stack}", LockInfo.mine(stack))
    table = f"arn:aws:dynamodb:{backend.region or load_stack(stack).cluster.region}:123456789012:table/{lock.table}"
    for action in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"):
        grants = policy.grants(action, table)
        assert grants, (action, table)
        assert all(any(_matches(p, lock.key) for p in s.condition_values("dynamodb:LeadingKeys")) for s in grants)
        assert not any(_matches(p, lock.key) for s in other.grants(action, table)
                       for p in s.condition_values("dynamodb:LeadingKeys"))


def _matches(pattern: str, value: str) -> bool:
    from tests.ci.iam_policy import _glob

    return _glob(pattern, value, ignore_case=False)


# --- what the Pulumi program creates --------------------------------------------------------------

@pytest.mark.slow  # the Pulumi program of every stack, ~30 s
def test_policy_allows_what_pulumi_needs_for_every_stack(policy: Policy, programs) -> None:
    missing: dict[str, set[str]] = defaultdict(set)
    unmapped = set()
    for stack, (cap, tokens) in programs.items():
        for r in _aws_registrations(cap):
            try:
                actions = pulumi_actions(r.type)
            except KeyError:
                unmapped.add(r.type)
                continue
            missing[r.type].update(a for a in actions if not policy.allows(a))
        for token in tokens:
            if token not in PULUMI_INVOKE_ACTIONS:
                unmapped.add(token)
                continue
            missing[token].update(a for a in PULUMI_INVOKE_ACTIONS[token] if not policy.allows(a))
    assert not unmapped, f"add these to tests/ci/aws_permissions.py (from the provider docs): {sorted(unmapped)}"
    assert not {k: v for k, v in missing.items() if v}, f"the deployer policy lacks: {dict(missing)}"


def test_the_permission_map_has_no_stale_types(programs) -> None:
    seen = {r.type for cap, _ in programs.values() for r in cap.registrations}
    called = {t for _, tokens in programs.values() for t in tokens}
    assert set(PULUMI_TYPE_ACTIONS) <= seen, f"no stack creates {sorted(set(PULUMI_TYPE_ACTIONS) - seen)}"
    assert set(PULUMI_INVOKE_ACTIONS) <= called, f"no stack calls {sorted(set(PULUMI_INVOKE_ACTIONS) - called)}"


def test_resources_created_under_a_tag_condition_carry_the_stack_tag(policy: Policy, programs) -> None:
    """The conditions only work if the program tags on create: every resource whose creation the
    policy allows only with the stack tag in the request carries that tag, valued its stack."""
    conditioned = {a for s in policy.statements if s.condition_values(REQUEST_TAG) for a in s.actions}
    untagged = []
    for stack, (cap, _) in programs.items():
        for r in _aws_registrations(cap):
            if set(pulumi_actions(r.type)) & conditioned and (r.inputs.get("tags") or {}).get(STACK_TAG) != stack:
                untagged.append(f"{stack}: {r.type} {r.name}")
    assert not untagged, untagged


def test_launch_templates_tag_what_run_instances_creates(programs) -> None:
    for stack, (cap, _) in programs.items():
        for lt in cap.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
            specs = {s["resourceType"]: s.get("tags", {}) for s in lt.inputs.get("tagSpecifications", [])}
            assert specs.get("instance", {}).get(STACK_TAG) == stack, (stack, lt.name)


def test_managed_policies_the_program_attaches_are_the_ones_allowed(policy: Policy, programs) -> None:
    attached = {r.inputs["policyArn"] for cap, _ in programs.values()
                for r in cap.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    allowed = set(policy.statement("IamAttachOnlyKnownManagedPolicies").condition_values("iam:PolicyARN"))
    assert attached == allowed, f"attached by the program {sorted(attached)}, allowed {sorted(allowed)}"


def test_buckets_the_program_creates_are_in_the_named_range(policy: Policy, programs) -> None:
    for stack, (cap, _) in programs.items():
        for b in cap.of_type("aws:s3/bucket:Bucket"):
            name = b.inputs.get("bucket") or f"{b.inputs['bucketPrefix']}0123456789"
            for action in ("s3:CreateBucket", "s3:PutBucketVersioning", "s3:DeleteBucket"):
                assert policy.allows(action, f"arn:aws:s3:::{name}"), (stack, action, name)


def test_roles_are_passed_only_to_ec2_and_eks(policy: Policy) -> None:
    grants = policy.grants("iam:PassRole")
    assert grants
    for s in grants:
        assert set(s.condition_values("iam:PassedToService")) <= {"ec2.amazonaws.com", "eks.amazonaws.com"}
        assert s.condition_values(RESOURCE_TAG) == [PRINCIPAL_STACK]


def test_tags_on_create_cover_exactly_the_ec2_creates(policy: Policy) -> None:
    """`ec2:CreateAction` takes bare API names (RunInstances, not ec2:RunInstances), one per tagged create."""
    creates = {a for s in policy.statements if s.condition_values(REQUEST_TAG) for a in s.actions
               if a.startswith("ec2:")}
    on_create = set(policy.statement("Ec2TagOnCreate").condition_values("ec2:CreateAction"))
    assert on_create == {a.split(":", 1)[1] for a in creates}
