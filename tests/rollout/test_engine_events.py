"""The engine's steps of `pulumi up` reach the rollout's display (issue 21 item 7), not a logger
nobody configured: the provisioner's progress is the wiring's relay, the command points the relay
at the display, and the display prints one greppable line per step that changes something.

The engine events are the fixtures' real-shaped `pulumi up` event log (fixtures/pulumi_events/),
replayed by the fake PulumiCommand of test_pulumi_provisioner through the real Automation API."""

from __future__ import annotations

import io
import shutil
from types import SimpleNamespace

import pytest

from gpufleet.plan import plan_stack
from gpufleet.project import find_project
from gpufleet.rollout import display as D, pulumi_provisioner, wiring
from gpufleet.rollout.pulumi_provisioner import ProvisionProgress
from gpufleet.spec import load_stack
from tests.rollout.e2e import rollout
from tests.rollout.project import REPO, make_project
from tests.rollout.test_pulumi_provisioner import BATCH1, FakePulumi, _provisioner


def test_each_engine_step_of_an_up_is_a_line_of_the_display(tmp_path):
    buf = io.StringIO()
    shown = D.PlainDisplay(SimpleNamespace(batches=()), lambda: 61.0, buf)
    p, _ = _provisioner(FakePulumi([("up-batch1-created.jsonl", 0, "")]), tmp_path, progress=shown.engine)
    p.provision(1, BATCH1)
    lines = buf.getvalue().splitlines()
    for slot in ("gpu-b0000-n00000", "gpu-b0000-n00001"):
        assert f"gpufleet: pulumi started op=create node={slot}  elapsed 0:01:01" in lines
        assert f"gpufleet: pulumi done op=create node={slot}  elapsed 0:01:01" in lines
    assert all(x.startswith("gpufleet: pulumi ") for x in lines) and not any(" op=same " in x for x in lines)


def test_a_failed_step_names_the_resource_and_the_engines_reason():
    step = ProvisionProgress(urn="urn:pulumi:gpu::gpufleet::gpufleet:compute:Compute$aws:ec2/instance:Instance::"
                             "gpu-b0001-n00002", type="aws:ec2/instance:Instance", op="create", status="failed",
                             slot="gpu-b0001-n00002", message='InsufficientInstanceCapacity: "p5" in us-east-1a')
    assert D.engine_line(step) == ('gpufleet: pulumi failed op=create node=gpu-b0001-n00002 '
                                   'reason="InsufficientInstanceCapacity: \\"p5\\" in us-east-1a"')
    stack = ProvisionProgress(urn="urn:pulumi:gpu::gpufleet::pulumi:pulumi:Stack::gpufleet-gpu",
                              type="pulumi:pulumi:Stack", op="same", status="done")
    assert D.engine_line(stack) is None
    vpc = ProvisionProgress(urn="urn:pulumi:gpu::gpufleet::aws:ec2/vpc:Vpc::main", type="aws:ec2/vpc:Vpc",
                            op="update", status="done")
    assert D.engine_line(vpc) == "gpufleet: pulumi done op=update resource=main"


def test_a_real_stacks_provisioner_reports_to_the_wirings_relay(monkeypatch, tmp_path):
    root = make_project(tmp_path / "p")
    shutil.copy(REPO / "stacks" / "Pulumi.dev.yaml", root / "stacks")
    project = find_project(root)
    seen: dict = {}

    class Provisioner:
        def outputs(self):
            return {}

        def inventory(self):
            return {}

    def for_stack(cls, spec, project, stack, **kw):
        seen.update(kw)
        return Provisioner()

    monkeypatch.setattr(pulumi_provisioner.PulumiProvisioner, "for_stack", classmethod(for_stack))
    monkeypatch.setattr(wiring, "_pool", lambda *a, **kw: SimpleNamespace())
    spec = load_stack("dev", project.stacks_dir)
    w = wiring.wire(spec, plan_stack(spec, project), project, "dev")
    assert w.engine is not None and seen["progress"] is w.engine
    got: list = []
    w.engine.to(got.append)
    step = ProvisionProgress(urn="u", type="aws:ec2/instance:Instance", op="create", status="started", slot="s")
    seen["progress"](step)
    assert got == [step]


@pytest.mark.slow  # a whole simulated rollout of the shipped local stack
def test_the_rollout_command_points_the_relay_at_its_display(monkeypatch, tmp_path):
    """A simulated stack given a relay its provisioner reports to, as a Pulumi stack's does: the
    rollout's display carries the engine's lines."""
    root = make_project(tmp_path / "p")
    buf = io.StringIO()
    monkeypatch.setattr(D, "make_display", lambda plan, elapsed, *a, **kw: D.PlainDisplay(plan, elapsed, buf))
    real_wire = wiring.wire

    def wire(spec, plan, project, stack):
        w = real_wire(spec, plan, project, stack)
        w.engine = relay = wiring.EngineRelay()
        provision = w.adapters.provisioner.provision

        def reporting(batch, slots, *a, **kw):
            for s in slots:
                relay(ProvisionProgress(urn=f"urn::{s.name}", type="aws:ec2/instance:Instance", op="create",
                                        status="done", slot=s.name))
            return provision(batch, slots, *a, **kw)
        w.adapters.provisioner.provision = reporting
        return w

    monkeypatch.setattr(wiring, "wire", wire)
    result = rollout(root, "local")
    assert result.exit_code == 0, result.output
    shown = buf.getvalue().splitlines()
    assert any(x.startswith("gpufleet: pulumi done op=create node=local-b0000-n00000  elapsed ") for x in shown)
    assert sum(x.startswith("gpufleet: pulumi done op=create node=") for x in shown) >= 125
