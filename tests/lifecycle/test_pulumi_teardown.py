"""The destroy's Pulumi side against a fake `PulumiCommand`: the real `pulumi.automation` Stack builds
every argv (as in tests/rollout/test_pulumi_provisioner.py); the fake keeps a state shaped like
`pulumi stack export` (version 3) and, like the real engine, refuses to delete a protected resource.

What is checked: what the state says exists (GPU nodes by slot and batch, FSx with its data
repository association, the rest), that a batch's step unprotects and deletes only that batch's
instances (every other protected resource stays protected), and that the last step unprotects the
rest and destroys the stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult
from pulumi.automation.errors import create_command_error
from semver import VersionInfo

from gpufleet.cloud.pulumi_stack import select_stack
from gpufleet.errors import GpufleetError
from gpufleet.lifecycle import pulumi_teardown as pt
from gpufleet.project import Project

STACK = "gpu"
P = f"urn:pulumi:{STACK}::gpufleet::"


def _res(urn: str, type_: str, id_: str | None = None, protect: bool = False, outputs: dict | None = None,
         custom: bool = True) -> dict[str, Any]:
    r: dict[str, Any] = {"urn": urn, "custom": custom, "type": type_, "protect": protect,
                         "inputs": {}, "outputs": outputs or {}}
    if id_:
        r["id"] = id_
        r["provider"] = P + "pulumi:providers:aws::default_7_5_0::04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    return r


def _node(slot: str, batch: int, iid: str) -> dict[str, Any]:
    return _res(P + f"gpufleet:compute:Compute$aws:ec2/instance:Instance::{slot}", pt.INSTANCE_TYPE, iid,
                protect=True, outputs={"id": iid, "privateIp": "10.0.0.4", "instanceType": "p5.48xlarge", "tags": {
                    "gpufleet.io/slot": slot, "gpufleet.io/batch": str(batch), "gpufleet.io/block": "0",
                    "gpufleet.io/role": "gpu-node", "gpufleet.io/stack": STACK}})


def state() -> list[dict[str, Any]]:
    return [
        _res(P + f"pulumi:pulumi:Stack::gpufleet-{STACK}", "pulumi:pulumi:Stack", custom=False),
        _res(P + "pulumi:providers:aws::default_7_5_0", "pulumi:providers:aws", "04da6b54-80e4-46f7-96ec-b56ff0331ba9"),
        _res(P + "aws:ec2/vpc:Vpc::gpu-vpc", "aws:ec2/vpc:Vpc", "vpc-0a1b2c3d"),
        _res(P + "gpufleet:slurm:SlurmController$aws:ec2/instance:Instance::gpu-slurm-head", pt.INSTANCE_TYPE,
             "i-0head", protect=True, outputs={"tags": {"gpufleet.io/role": "slurm-controller"}}),
        _res(P + "gpufleet:storage:Storage$aws:fsx/lustreFileSystem:LustreFileSystem::gpu-fsx", pt.FSX_TYPE,
             "fs-0123456789abcdef0", protect=True, outputs={"deploymentType": "PERSISTENT_2", "storageCapacity": 2400}),
        _res(P + "gpufleet:storage:Storage$aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation::gpu-dra",
             pt.DRA_TYPE, "dra-0123456789abcdef0", outputs={"fileSystemId": "fs-0123456789abcdef0",
                                                             "dataRepositoryPath": "s3://gpu-data/datasets"}),
        _node("gpu-b0000-n00000", 1, "i-0aaa"), _node("gpu-b0000-n00001", 1, "i-0bbb"),
        _node("gpu-b0001-n00002", 2, "i-0ccc"),
    ]


class FakePulumi(auto.PulumiCommand):
    """`stack select|export|import` and `destroy [--target URN ...]`, refusing protected resources."""

    def __init__(self) -> None:  # no super().__init__: it would exec pulumi
        self.command = "pulumi"
        self.version = VersionInfo.parse("3.200.0")
        self.calls: list[list[str]] = []
        self.resources = {r["urn"]: r for r in state()}
        self.imports: list[dict] = []

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
        if a[:2] == ["stack", "export"]:
            return json.dumps({"version": 3, "deployment": {"manifest": {}, "resources": list(self.resources.values())}}), "", 0
        if a[:2] == ["stack", "import"]:
            doc = json.loads(Path(a[a.index("--file") + 1]).read_text())
            self.imports.append(doc)
            self.resources = {r["urn"]: r for r in doc["deployment"]["resources"]}
            return "", "", 0
        if a[0] == "destroy":
            targets = [a[i + 1] for i, x in enumerate(a) if x == "--target"]
            doomed = targets or list(self.resources)
            for urn in doomed:
                if self.resources.get(urn, {}).get("protect"):
                    return "", (f"error: resource \"{urn}\" cannot be deleted\nbecause it is protected. To unprotect "
                                f"the resource, either remove the `protect` flag from the resource in your Pulumi "
                                f"program and run `pulumi up`, or use the command:\n`pulumi state unprotect '{urn}'`"), 255
            for urn in doomed:
                self.resources.pop(urn, None)
            return "destroyed", "", 0
        if a[:2] == ["stack", "history"]:  # the Automation API reads the update's summary after a destroy
            return json.dumps([{"kind": "destroy", "startTime": "2026-12-02T08:00:00.000Z", "message": "",
                                "endTime": "2026-12-02T08:03:00.000Z", "environment": {}, "config": {},
                                "result": "succeeded", "resourceChanges": {"delete": 1}}]), "", 0
        raise AssertionError(f"unexpected pulumi call {a}")

    def protected(self) -> set[str]:
        return {u for u, r in self.resources.items() if r.get("protect")}


@pytest.fixture
def fake_stack(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text("name: gpufleet\nruntime: python\n")
    fake = FakePulumi()
    stack = select_stack(Project(root=tmp_path, name="gpufleet", stacks_dir=tmp_path / "stacks"), STACK,
                         pulumi_command=fake)
    return fake, pt.PulumiTeardown(stack)


def test_the_state_read_as_nodes_storage_and_the_rest(fake_stack):
    fake, teardown = fake_stack
    export = teardown.export()
    nodes = pt.gpu_nodes(export)
    assert {s: (n.batch, n.instance_id) for s, (n, _) in nodes.items()} == {
        "gpu-b0000-n00000": (1, "i-0aaa"), "gpu-b0000-n00001": (1, "i-0bbb"), "gpu-b0001-n00002": (2, "i-0ccc")}
    [fs] = pt.file_systems(export)
    assert (fs.fs_id, fs.deployment_type, fs.repositories) == ("fs-0123456789abcdef0", "PERSISTENT_2",
                                                              ("s3://gpu-data/datasets",))
    rest = {r.name: r.protected for r in pt.other_resources(export)}
    assert rest == {"gpu-vpc": False, "gpu-slurm-head": True, "gpu-dra": False}  # no root, no provider, no node


def test_the_fake_refuses_a_protected_delete_as_pulumi_does(fake_stack):
    fake, teardown = fake_stack
    with pytest.raises(GpufleetError) as err:
        teardown._destroy([P + "gpufleet:compute:Compute$aws:ec2/instance:Instance::gpu-b0001-n00002"])
    assert "protected" in str(err.value) and "pulumi destroy of stack gpu" in str(err.value)


def test_a_batch_step_unprotects_and_deletes_only_that_batch(fake_stack):
    fake, teardown = fake_stack
    before = fake.protected()
    assert teardown.terminate(2, ["gpu-b0001-n00002"]) == ["i-0ccc"]
    gone = P + "gpufleet:compute:Compute$aws:ec2/instance:Instance::gpu-b0001-n00002"
    assert gone not in fake.resources
    assert fake.protected() == before - {gone}  # every other protected resource still protected
    [imported] = fake.imports
    flipped = [r["urn"] for r in imported["deployment"]["resources"] if not r.get("protect") and r["urn"] in before]
    assert flipped == [gone]
    destroy = [c for c in fake.calls if c[0] == "destroy"]
    assert len(destroy) == 1 and destroy[0].count("--target") == 1 and gone in destroy[0]
    assert "--yes" in destroy[0] and "--stack" in destroy[0]
    # run again (a resumed step): the slot is gone, nothing is imported or destroyed
    fake.calls.clear()
    assert teardown.terminate(2, ["gpu-b0001-n00002"]) == []
    assert [c[:2] for c in fake.calls] == [["stack", "export"]]


def test_the_last_step_unprotects_the_rest_and_destroys_the_stack(fake_stack):
    fake, teardown = fake_stack
    teardown.terminate(2, ["gpu-b0001-n00002"])
    teardown.terminate(1, ["gpu-b0000-n00000", "gpu-b0000-n00001"])
    export = teardown.export()
    targets = [r.urn for r in pt.other_resources(export)] + [f.urn for f in pt.file_systems(export)]
    result = teardown.remove(targets)
    assert result == {"unprotected": 2, "deleted": 4}  # the controller and the file system were protected
    assert fake.resources == {}
    last = [c for c in fake.calls if c[0] == "destroy"][-1]
    assert "--target" not in last
