"""The Pulumi Automation API provisioner against a fake `PulumiCommand` (the CLI cannot run here).

The fake is the only stand-in: the real `pulumi.automation` Stack and LocalWorkspace build every
argv, watch the event log and parse the JSON, so the tests assert the exact CLI calls a real
`pulumi` would receive. `up` replays an engine event log from fixtures/pulumi_events/ (see its
SOURCES.md) and applies the instances it created to the fake's state. EC2 calls go to a moto
server; `ReportInstanceStatus`, which moto lacks, to a botocore Stubber that checks its parameters.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult
from pulumi.automation.errors import create_command_error
from semver import VersionInfo

from gpufleet.errors import ProvisioningError
from gpufleet.plan.model import NodeSlot
from gpufleet.project import Project
from gpufleet.ports import Provisioner
from gpufleet.rollout.pulumi_provisioner import PulumiProvisioner, ProvisionProgress, RetryPolicy
from tests.unit.moto_server import moto_client, moto_endpoint  # noqa: F401 (fixtures)

EVENTS = Path(__file__).parent / "fixtures" / "pulumi_events"
STACK = "gpu"
CONFLICT = "error: [409] Conflict: Another update is currently in progress.\n"
NOT_SET = "error: configuration key 'gpufleet:rollout.targetBatch' not found for stack 'gpu'\n"
HISTORY = [{"kind": "update", "startTime": "2026-11-30T23:00:00.000Z", "endTime": "2026-11-30T23:04:00.000Z",
            "message": "", "environment": {}, "config": {}, "result": "succeeded", "resourceChanges": {}}]


def slot(i: int, batch: int) -> NodeSlot:
    block = 0 if i < 2 else 1
    return NodeSlot(name=f"gpu-b{block:04d}-n{i:05d}", index=i, block=block, batch=batch, units=(i,))


BATCH1 = [slot(0, 1), slot(1, 1)]
BATCH2 = [slot(2, 2), slot(3, 2), slot(4, 2)]


class FakePulumi(auto.PulumiCommand):
    """A `pulumi` CLI that records argv, keeps config and state, and replays scripted updates."""

    def __init__(self, ups: list[tuple[str | None, int, str]]) -> None:  # no super().__init__: it would exec pulumi
        self.command = "pulumi"
        self.version = VersionInfo.parse("3.200.0")  # <= 3.205: the engine events go through --event-log
        self.calls: list[list[str]] = []
        self.config: dict[str, str] = {}
        self.resources: dict[str, dict[str, Any]] = {}  # URN -> state resource, as `stack export` holds it
        self.ups = list(ups)

    def run(self, args, cwd, additional_env, on_output=None, on_error=None) -> CommandResult:
        args = list(args)
        self.calls.append(args)
        out, err, code = self._answer(args)
        result = CommandResult(stdout=out, stderr=err, code=code)
        if code:
            raise create_command_error(result)
        return result

    def _answer(self, a: list[str]) -> tuple[str, str, int]:
        if a[:2] == ["stack", "select"]:
            return "", "", 0
        if a[:2] == ["config", "get"]:
            key = a[3]
            if key not in self.config:
                return "", NOT_SET, 255
            return json.dumps({"value": self.config[key], "secret": False}), "", 0
        if a[:2] == ["config", "set"]:
            self.config[a[3]] = a[-1]
            return "", "", 0
        if a[0] == "up":
            return self._up(a)
        if a[:2] == ["stack", "output"]:
            return json.dumps({"nodes": self.nodes(), "vpcId": "vpc-0a1b2c3d"}), "", 0
        if a[:2] == ["stack", "history"]:
            return json.dumps(HISTORY), "", 0
        if a[:2] == ["stack", "export"]:
            return json.dumps({"version": 3, "deployment": {"manifest": {}, "resources": list(self.resources.values())}}), "", 0
        if a[:2] == ["state", "delete"]:
            self.resources.pop(a[2])
            return "", "", 0
        raise AssertionError(f"unexpected pulumi call {a}")

    def _up(self, a: list[str]) -> tuple[str, str, int]:
        fixture, code, stderr = self.ups.pop(0)
        if fixture is not None:
            log = Path(a[a.index("--event-log") + 1])
            lines = (EVENTS / fixture).read_text()
            log.write_text(lines)
            for line in lines.splitlines():
                event = json.loads(line).get("resOutputsEvent")
                if event and event["metadata"]["type"] == "aws:ec2/instance:Instance":
                    new = event["metadata"]["new"]
                    self.resources[new["urn"]] = {"urn": new["urn"], "type": new["type"], "id": new["id"],
                                                  "custom": True, "protect": True, "inputs": new["inputs"],
                                                  "outputs": new["outputs"]}
        return "", stderr, code

    def nodes(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.resources.values():
            tags = r["outputs"]["tags"]
            out.setdefault(tags["gpufleet.io/batch"], []).append({
                "slot": tags["gpufleet.io/slot"], "instanceId": r["id"], "privateIp": r["outputs"]["privateIp"],
                "batch": int(tags["gpufleet.io/batch"]), "block": int(tags["gpufleet.io/block"])})
        return out

    def seed(self, fixture: str) -> None:
        """State as if an earlier update had replayed `fixture`."""
        self.ups.insert(0, (fixture, 0, ""))
        self._up(["up", "--event-log", "/dev/null"])


def _argv(calls: list[list[str]]) -> list[list[str]]:
    """The calls with the event log's temporary path masked."""
    return [[("<log>" if i and c[i - 1] == "--event-log" else x) for i, x in enumerate(c)] for c in calls]


SELECT = ["stack", "select", "--stack", STACK]
GET_TARGET = ["config", "get", "--path", "gpufleet:rollout.targetBatch", "--json", "--stack", STACK]


def SET_TARGET(n: int) -> list[str]:  # noqa: N802
    return ["config", "set", "--path", "gpufleet:rollout.targetBatch", "--plaintext", "--stack", STACK,
            "--non-interactive", "--", str(n)]


UP = ["up", "--yes", "--skip-preview", "--color", "never", "--suppress-progress", "--continue-on-error",
      "--exec-kind", "auto.local", "--event-log", "<log>", "--stack", STACK]
AFTER_UP = [["stack", "output", "--json", "--stack", STACK], ["stack", "output", "--json", "--show-secrets", "--stack", STACK],
            ["stack", "history", "--json", "--show-secrets", "--page-size", "1", "--page", "1", "--stack", STACK]]
EXPORT = ["stack", "export", "--stack", STACK]


def generation_key(slot_name: str) -> str:
    return f'gpufleet:rollout.slotGenerations["{slot_name}"]'


def SET_GENERATION(slot_name: str, n: int) -> list[str]:  # noqa: N802
    return ["config", "set", "--path", generation_key(slot_name), "--plaintext", "--stack", STACK,
            "--non-interactive", "--", str(n)]


def _provisioner(fake: FakePulumi, tmp_path: Path, ec2=None, progress=None, attempts: int = 3):
    project = Project(root=tmp_path, name="gpufleet", stacks_dir=tmp_path / "stacks")
    from gpufleet.spec import load_stack

    sleeps: list[float] = []
    p = PulumiProvisioner.for_stack(load_stack("dev"), project, STACK, pulumi_command=fake,
                                    ec2=ec2 or (lambda: pytest.fail("no EC2 call expected")),
                                    progress=progress or (lambda e: None), retry=RetryPolicy(attempts, 5.0, 60.0),
                                    sleep=sleeps.append, rng=random.Random(7))
    return p, sleeps


def test_it_is_the_rollout_provisioner_port_on_the_projects_stack(tmp_path):
    fake = FakePulumi([])
    p, _ = _provisioner(fake, tmp_path)
    assert isinstance(p, Provisioner)
    # the CLI runs in the project root: it reads Pulumi.yaml there (a `backend.url` included)
    assert p.stack.workspace.work_dir == str(tmp_path) and fake.calls == [SELECT]
    assert p.instance_urn("gpu-b0000-n00001") == (
        "urn:pulumi:gpu::gpufleet::gpufleet:compute:Compute$aws:ec2/instance:Instance::gpu-b0000-n00001")


def test_a_batch_raises_the_target_runs_up_and_reads_the_nodes_output(tmp_path):
    fake = FakePulumi([("up-batch1-created.jsonl", 0, "")])
    seen: list[ProvisionProgress] = []
    p, sleeps = _provisioner(fake, tmp_path, progress=seen.append)
    result = p.provision(1, BATCH1)
    assert _argv(fake.calls) == [SELECT, GET_TARGET, SET_TARGET(1), UP, *AFTER_UP]
    assert {s: (i.instance_id, i.private_ip, i.batch, i.block) for s, i in result.instances.items()} == {
        "gpu-b0000-n00000": ("i-0a1b2c3d4e5f60700", "10.0.0.4", 1, 0),
        "gpu-b0000-n00001": ("i-0a1b2c3d4e5f60701", "10.0.0.5", 1, 0)}
    assert result.shortfall == {} and sleeps == []
    nodes = [(e.slot, e.op, e.status) for e in seen if e.slot]
    assert nodes == [("gpu-b0000-n00000", "create", "started"), ("gpu-b0000-n00000", "create", "done"),
                     ("gpu-b0000-n00001", "create", "started"), ("gpu-b0000-n00001", "create", "done")]
    assert [e.type for e in seen if not e.slot] == ["pulumi:pulumi:Stack", "aws:ec2/launchTemplate:LaunchTemplate"]


def test_a_target_already_higher_is_never_lowered(tmp_path):
    fake = FakePulumi([("up-batch1-created.jsonl", 0, "")])
    fake.config["gpufleet:rollout.targetBatch"] = "2"
    p, _ = _provisioner(fake, tmp_path)
    p.provision(1, BATCH1)
    assert _argv(fake.calls) == [SELECT, GET_TARGET, UP, *AFTER_UP]


def test_a_capacity_shortfall_returns_the_slots_without_an_instance(tmp_path):
    fake = FakePulumi([("up-batch2-capacity.jsonl", 255, "error: update failed\n")])
    fake.seed("up-batch1-created.jsonl")
    fake.config["gpufleet:rollout.targetBatch"] = "1"
    seen: list[ProvisionProgress] = []
    p, sleeps = _provisioner(fake, tmp_path, progress=seen.append)
    result = p.provision(2, BATCH2)
    # the failed update leaves the outputs as they were: what came up is read from the state
    assert _argv(fake.calls) == [SELECT, GET_TARGET, SET_TARGET(2), UP, EXPORT]
    assert sorted(result.instances) == ["gpu-b0001-n00002", "gpu-b0001-n00003"]
    assert list(result.shortfall) == ["gpu-b0001-n00004"]
    assert "InsufficientInstanceCapacity" in result.shortfall["gpu-b0001-n00004"] and sleeps == []
    failed, = [e for e in seen if e.status == "failed"]
    assert failed.slot == "gpu-b0001-n00004" and "us-east-1b" in failed.message


def test_no_capacity_at_all_is_a_retryable_error_naming_the_slots(tmp_path):
    fake = FakePulumi([("up-batch2-no-capacity.jsonl", 255, "error: update failed\n")])
    p, _ = _provisioner(fake, tmp_path)
    with pytest.raises(ProvisioningError, match="InsufficientInstanceCapacity") as err:
        p.provision(2, BATCH2)
    assert err.value.retryable and err.value.slots == tuple(s.name for s in BATCH2)


def test_throttling_is_retried_with_backoff_then_succeeds(tmp_path):
    fake = FakePulumi([("up-batch2-throttled.jsonl", 255, "error: update failed\n"),
                       ("up-batch2-created.jsonl", 0, "")])
    p, sleeps = _provisioner(fake, tmp_path)
    result = p.provision(2, BATCH2)
    assert _argv(fake.calls) == [SELECT, GET_TARGET, SET_TARGET(2), UP, UP, *AFTER_UP]
    assert sorted(result.instances) == [s.name for s in BATCH2] and len(sleeps) == 1 and 0 <= sleeps[0] <= 5.0


def test_a_concurrent_update_is_retried_then_reported_as_retryable(tmp_path):
    # The CLI fails before the update starts, so no event log is written (and the SDK waits 5 s for one)
    fake = FakePulumi([(None, 255, CONFLICT)] * 2)
    p, sleeps = _provisioner(fake, tmp_path, attempts=2)
    with pytest.raises(ProvisioningError, match="concurrent update.*after 2 attempts.*409") as err:
        p.provision(1, BATCH1)
    assert err.value.retryable
    assert _argv(fake.calls) == [SELECT, GET_TARGET, SET_TARGET(1), UP, UP]
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= 5.0


def test_backoff_doubles_under_a_cap_with_full_jitter():
    policy, rng = RetryPolicy(attempts=6, base_s=5.0, cap_s=60.0), random.Random(3)
    delays = [[policy.delay(a, rng) for _ in range(200)] for a in range(6)]
    for attempt, ds in enumerate(delays):
        assert 0 <= min(ds) and max(ds) <= min(60.0, 5.0 * 2 ** attempt)
        assert max(ds) > 0.8 * min(60.0, 5.0 * 2 ** attempt)  # jitter spans the whole window


def test_a_concurrent_update_then_success(tmp_path):
    fake = FakePulumi([(None, 255, CONFLICT), ("up-batch1-created.jsonl", 0, "")])
    p, sleeps = _provisioner(fake, tmp_path)
    assert sorted(p.provision(1, BATCH1).instances) == [s.name for s in BATCH1] and len(sleeps) == 1


def test_a_quota_error_is_not_retried(tmp_path):
    fake = FakePulumi([("up-batch2-quota.jsonl", 255, "error: update failed\n")])
    p, sleeps = _provisioner(fake, tmp_path)
    with pytest.raises(ProvisioningError, match="VcpuLimitExceeded") as err:
        p.provision(2, BATCH2)
    assert not err.value.retryable and err.value.slots == ("gpu-b0001-n00002",) and sleeps == []
    assert [c[0] for c in fake.calls].count("up") == 1


def test_inventory_reads_the_state(tmp_path):
    fake = FakePulumi([])
    fake.seed("up-batch1-created.jsonl")
    p, _ = _provisioner(fake, tmp_path)
    inv = p.inventory()
    assert _argv(fake.calls) == [SELECT, EXPORT]
    assert {s: i.instance_id for s, i in inv.items()} == {"gpu-b0000-n00000": "i-0a1b2c3d4e5f60700",
                                                          "gpu-b0000-n00001": "i-0a1b2c3d4e5f60701"}


# --- replace: boto3 against moto (and a Stubber for ReportInstanceStatus) ---------------------------

class Ec2Split:
    """The EC2 calls `replace` makes: ReportInstanceStatus to a Stubber (moto lacks it), the rest to moto."""

    def __init__(self, moto, stubbed) -> None:
        self.moto, self.stubbed = moto, stubbed

    def report_instance_status(self, **kw):
        return self.stubbed.report_instance_status(**kw)

    def __getattr__(self, name):
        return getattr(self.moto, name)


@pytest.fixture
def ec2(moto_client):
    import boto3

    moto = moto_client("ec2", "us-east-1")
    image = moto.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    stubbed = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(stubbed)
    stubber.activate()
    yield moto, stubber, Ec2Split(moto, stubbed), image
    stubber.deactivate()


def _real_instance(moto, image: str) -> str:
    return moto.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large")["Instances"][0]["InstanceId"]


def _seed_with(fake: FakePulumi, slot_name: str, instance_id: str) -> str:
    fake.seed("up-batch1-created.jsonl")
    urn = next(u for u in fake.resources if u.endswith(f"::{slot_name}"))
    fake.resources[urn]["id"] = fake.resources[urn]["outputs"]["id"] = instance_id
    return urn


@pytest.mark.parametrize("action", ["stop-and-report", "terminate"])
def test_replace_takes_the_instance_out_of_service_forgets_it_and_recreates_the_slot(tmp_path, ec2, action):
    moto, stubber, client, image = ec2
    old = _real_instance(moto, image)
    fake = FakePulumi([("up-replace-n00001.jsonl", 0, "")])
    urn = _seed_with(fake, "gpu-b0000-n00001", old)
    if action == "stop-and-report":
        stubber.add_response("report_instance_status", {}, {
            "Instances": [old], "Status": "impaired", "ReasonCodes": ["performance-other"],
            "Description": "gpufleet: slot gpu-b0000-n00001 failed its gates: xid-79"})
    p, _ = _provisioner(fake, tmp_path, ec2=lambda: client)
    new = p.replace(BATCH1[1], action, reason="xid-79")
    stubber.assert_no_pending_responses()
    assert (new.slot, new.instance_id, new.private_ip) == ("gpu-b0000-n00001", "i-0f9e8d7c6b5a40311", "10.0.0.9")
    assert urn == p.instance_urn("gpu-b0000-n00001")
    # the new instance's generation tag is in the config before the old one is forgotten
    assert _argv(fake.calls) == [SELECT, EXPORT, SET_GENERATION("gpu-b0000-n00001", 1),
                                 ["state", "delete", urn, "--force", "--yes", "--stack", STACK],
                                 ["up", "--yes", "--skip-preview", "--target", urn, "--color", "never",
                                  "--suppress-progress", "--continue-on-error", "--exec-kind", "auto.local",
                                  "--event-log", "<log>", "--stack", STACK], *AFTER_UP]
    described = moto.describe_instances(InstanceIds=[old])["Reservations"][0]["Instances"][0]
    want = "stopped" if action == "stop-and-report" else "terminated"
    assert described["State"]["Name"] == want
    tags = {t["Key"]: t["Value"] for t in described.get("Tags", [])}
    assert (tags.get("gpufleet.io/replaced") == "stopped-and-reported") == (action == "stop-and-report")


def test_replace_after_a_crash_past_the_forget_only_recreates(tmp_path):
    fake = FakePulumi([("up-replace-n00001.jsonl", 0, "")])
    fake.seed("up-batch1-created.jsonl")
    urn = next(u for u in fake.resources if u.endswith("::gpu-b0000-n00001"))
    del fake.resources[urn]  # the earlier attempt set the generation, stopped and forgot it, then died
    fake.config[generation_key("gpu-b0000-n00001")] = "1"
    p, _ = _provisioner(fake, tmp_path)  # no EC2 call may happen now
    assert p.replace(BATCH1[1], "terminate").instance_id == "i-0f9e8d7c6b5a40311"
    assert [c[:2] for c in fake.calls] == [SELECT[:2], EXPORT[:2], ["config", "get"], ["config", "set"],
                                           ["up", "--yes"], *[c[:2] for c in AFTER_UP]]
    assert fake.calls[3][-1] == "1"  # the same generation the forgotten call meant, not one past it


def test_an_unknown_replace_action_is_refused(tmp_path):
    p, _ = _provisioner(FakePulumi([]), tmp_path)
    with pytest.raises(ProvisioningError, match="unknown replace action"):
        p.replace(BATCH1[0], "reboot")  # type: ignore[arg-type]


def test_the_urn_it_targets_is_the_one_the_program_registers(tmp_path):
    from gpufleet.program.capture import capture_program

    cap = capture_program("dev", target_batch=1)
    node = next(r for r in cap.of_type("aws:ec2/instance:Instance") if r.name == "dev-b0000-n00000")
    fake = FakePulumi([])
    project = Project(root=tmp_path, name="gpufleet", stacks_dir=tmp_path)
    p = PulumiProvisioner(auto.Stack.select("dev", auto.LocalWorkspace(work_dir=str(tmp_path), pulumi_command=fake)),
                          project.name, ec2=lambda: pytest.fail("no EC2 call expected"))
    assert p.instance_urn("dev-b0000-n00000") == node.urn


# --- the replacement-generation tag (issue 21 item 6: spares rebuilt from the provider) -------------

def test_inventory_reads_each_instances_generation_tag_an_untagged_one_is_0(tmp_path):
    fake = FakePulumi([])
    fake.seed("up-batch1-created.jsonl")
    urn = next(u for u in fake.resources if u.endswith("::gpu-b0000-n00001"))
    fake.resources[urn]["outputs"]["tags"]["gpufleet.io/generation"] = "2"
    p, _ = _provisioner(fake, tmp_path)
    assert {s: i.generation for s, i in p.inventory().items()} == {"gpu-b0000-n00000": 0, "gpu-b0000-n00001": 2}


def test_a_replacement_is_tagged_one_past_the_instance_it_replaces(tmp_path, ec2):
    moto, _, client, image = ec2
    fake = FakePulumi([("up-replace-n00001.jsonl", 0, "")])
    urn = _seed_with(fake, "gpu-b0000-n00001", _real_instance(moto, image))
    fake.resources[urn]["outputs"]["tags"]["gpufleet.io/generation"] = "2"  # its third instance
    p, _ = _provisioner(fake, tmp_path, ec2=lambda: client)
    p.replace(BATCH1[1], "terminate")
    calls = _argv(fake.calls)
    assert calls.index(SET_GENERATION("gpu-b0000-n00001", 3)) < calls.index(
        ["state", "delete", urn, "--force", "--yes", "--stack", STACK])
    assert fake.config[generation_key("gpu-b0000-n00001")] == "3"


def test_the_nodes_output_carries_the_generation_and_an_older_row_reads_0():
    from gpufleet.rollout.pulumi_provisioner import next_generation, nodes_from_output
    from gpufleet.ports import Instance

    rows = {"1": [{"slot": "a", "instanceId": "i-1", "privateIp": "10.0.0.1", "batch": 1, "block": 0, "generation": 4},
                  {"slot": "b", "instanceId": "i-2", "privateIp": "10.0.0.2", "batch": 1, "block": 0}]}
    assert {s: i.generation for s, i in nodes_from_output(rows).items()} == {"a": 4, "b": 0}
    old = Instance(slot="a", instance_id="i-1", batch=1, block=0, generation=4)
    assert next_generation(old, None) == next_generation(old, 9) == 5  # the state's instance rules
    assert next_generation(None, 5) == 5 and next_generation(None, None) == 0


def test_a_shrinks_terminate_ends_the_instances_forgets_them_and_updates_on_the_rollouts_layout(tmp_path, ec2):
    """Issue 23 item 1 on a Pulumi stack: the released slots' instances are terminated in EC2 and
    taken out of the state (deployed instances are protected), then one `up` runs with
    gpufleet:rollout.layout written first, so the program drops them from deployedSlots; a rerun
    finds nothing left to terminate and only converges."""
    from gpufleet.plan import build_plan
    from gpufleet.plan.resize import encode_layout
    from gpufleet.spec import load_stack

    moto, _stubber, client, image = ec2
    old = _real_instance(moto, image)
    fake = FakePulumi([(None, 0, ""), (None, 0, "")])
    urn = _seed_with(fake, "gpu-b0000-n00001", old)
    p, _ = _provisioner(fake, tmp_path, ec2=lambda: client)
    layout = build_plan(load_stack("dev"))
    p.take_layout(layout)
    assert p.terminate(["gpu-b0000-n00001"]) == [old]
    set_layout = ["config", "set", "--path", "gpufleet:rollout.layout", "--plaintext", "--stack", STACK,
                  "--non-interactive", "--", encode_layout(layout)]
    assert _argv(fake.calls) == [SELECT, EXPORT, ["state", "delete", urn, "--force", "--yes", "--stack", STACK],
                                 set_layout, UP, *AFTER_UP, EXPORT]
    assert moto.describe_instances(InstanceIds=[old])["Reservations"][0]["Instances"][0]["State"]["Name"] == "terminated"
    assert fake.config["gpufleet:rollout.layout"] == encode_layout(layout)
    fake.calls.clear()
    assert p.terminate(["gpu-b0000-n00001"]) == []  # resumed after a crash: nothing left to terminate
    assert ["state", "delete", urn, "--force", "--yes", "--stack", STACK] not in fake.calls


def test_terminate_that_leaves_an_instance_in_the_state_is_an_error_naming_the_slot(tmp_path):
    fake = FakePulumi([(None, 0, "")])
    fake.seed("up-batch1-created.jsonl")
    p, _ = _provisioner(fake, tmp_path, ec2=lambda: type("E", (), {"terminate_instances": lambda self, **k: None})())
    original = fake._answer

    def keep_state(a):  # a state delete that silently does nothing
        return ("", "", 0) if a[:2] == ["state", "delete"] else original(a)
    fake._answer = keep_state
    with pytest.raises(ProvisioningError, match="gpu-b0000-n00001 still have an instance"):
        p.terminate(["gpu-b0000-n00001"])
