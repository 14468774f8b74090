"""The change set and confirmation of the day-two commands that terminate, drain or buy (issue 23
item 2): `pool replace`, `pool blacklist`, `upgrade`, `ops remediation run`.

On a real stack (`dev`) the pool commands refuse off a terminal without --yes (exit 2) before the
day-two context (lock, journals, provider, pool) is opened; --dry-run prints and exits 0. On the
simulated fleet (never asked) what the change set lists is what then happens; the upgrade, forced
to count as real, refuses off a terminal with nothing drained."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from gpufleet import changeset_command
from gpufleet.daytwo import lifecycle, upgrade_command
from gpufleet.daytwo.context import open_day_two
from gpufleet.errors import GpufleetError
from gpufleet.project import load_project
from tests.daytwo.fleet import STACK, admitted, daytwo_events, gpufleet, ledger, pool_doc
from tests.rollout.project import REPO, make_project

SLOT = "dev-b0000-n00000"


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    """A project with the real `dev` stack."""
    p = make_project(tmp_path / "dev")
    shutil.copy(REPO / "stacks" / "Pulumi.dev.yaml", p / "stacks")
    return p


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Opening a day-two context, recorded and stopped there (on a real stack it would lock, read
    the journals and reach Pulumi and SSH)."""
    calls: list[str] = []

    def reached(stack, command, **_kw):
        calls.append(command)
        raise GpufleetError(f"reached the day-two context of {stack}")

    monkeypatch.setattr("gpufleet.daytwo.context.open_day_two", reached)
    return calls


@pytest.mark.parametrize("sub", ["replace", "blacklist"])
def test_a_real_stack_s_pool_change_off_a_terminal_is_refused_before_the_pool_is_opened(dev, opened, sub):
    out = gpufleet(dev, "pool", sub, "-s", "dev", SLOT, "--reason", "noisy fans")
    assert out.exit_code == 2 and "--yes" in out.output and "no one is at a terminal" in out.output, out.output
    assert opened == [] and not (dev / ".gpufleet").exists()
    if sub == "replace":
        assert "stop          1 instance: dev-b0000-n00000" in out.output  # rollout.replaceAction stop-and-report
        assert "launch        1 instance: dev-b0000-n00000" in out.output and "cost per hour: +$0.00" in out.output
    else:
        assert "drain         1 pool-node: dev-b0000-n00000" in out.output


@pytest.mark.parametrize("sub", ["replace", "blacklist"])
def test_a_dry_run_prints_and_exits_0_and_yes_goes_ahead(dev, opened, sub):
    dry = gpufleet(dev, "pool", sub, "-s", "dev", SLOT, "--reason", "noisy fans", "--dry-run")
    assert dry.exit_code == 0 and f"change set: gpufleet pool {sub} -s dev" in dry.output, dry.output
    assert opened == []
    go = gpufleet(dev, "pool", sub, "-s", "dev", SLOT, "--reason", "noisy fans", "--yes")
    assert go.exit_code == 1 and "reached the day-two context of dev" in go.output, go.output
    assert opened == [f"pool {sub}"]


def test_at_a_terminal_a_no_changes_nothing(dev, opened, monkeypatch):
    monkeypatch.setattr(changeset_command, "at_a_terminal", lambda: True)
    from click.testing import CliRunner

    from gpufleet.cli import main

    out = CliRunner().invoke(main, ["--project", str(dev), "pool", "replace", "-s", "dev", SLOT, "--reason", "x"],
                             input="n\n")
    assert out.exit_code == 1 and "Apply these changes to stack dev" in out.output and opened == []


def test_a_slot_the_plan_lacks_is_refused_before_the_change_set(dev):
    out = gpufleet(dev, "pool", "replace", "-s", "dev", "dev-b0009-n00099", "--reason", "x")
    assert out.exit_code == 2 and "no slot 'dev-b0009-n00099'" in out.output and "change set" not in out.output


def _slot_events(fleet: Path, slot: str) -> list[str]:
    return [e["event"] for e in ledger(fleet) if e.get("slot") == slot]


def test_on_the_simulator_replace_does_what_its_change_set_says(fleet):
    slot = admitted(fleet)[3]
    before, journal = _slot_events(fleet, slot), daytwo_events(fleet)
    dry = gpufleet(fleet, "pool", "replace", "-s", STACK, slot, "--reason", "noisy fans", "--dry-run")
    assert dry.exit_code == 0 and "(simulated stack" in dry.output, dry.output
    assert _slot_events(fleet, slot) == before and daytwo_events(fleet) == journal  # nothing happened
    listed = [line.split()[0] for line in dry.output.splitlines() if line.strip().endswith(f"instance: {slot}")]
    assert listed == ["launch", "stop"]
    out = gpufleet(fleet, "pool", "replace", "-s", STACK, slot, "--reason", "noisy fans")  # never asked
    assert out.exit_code == 0, out.output
    assert sorted(_slot_events(fleet, slot)[len(before):]) == sorted(listed)  # one stop, one launch
    assert pool_doc(fleet)["nodes"][slot]["state"] == "admitted"


def test_remediation_dry_run_lists_the_ladder_and_changes_nothing(fleet):
    slot = admitted(fleet)[0]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-79").exit_code == 0
    with open_day_two(STACK, "test", project=load_project(fleet)) as d:
        lifecycle.quarantine(d, slot, "xid-79", "the gates found xid-79", "alert")
    journal = daytwo_events(fleet)
    out = gpufleet(fleet, "ops", "remediation", "run", "-s", STACK, slot, "--reason", "alert", "--dry-run")
    assert out.exit_code == 0, out.output
    assert "configure     1 instance" in out.output and "reboot" in out.output and "launch        1 instance" in out.output
    assert daytwo_events(fleet) == journal and pool_doc(fleet)["nodes"][slot]["state"] == "quarantined"


@pytest.fixture
def as_real(monkeypatch) -> None:
    """The upgrade's change set as a real stack's (the fleet is simulated, which never asks)."""
    build = upgrade_command.upgrade_changes
    monkeypatch.setattr(upgrade_command, "upgrade_changes",
                        lambda *a, **k: dataclasses.replace(build(*a, **k), simulated=False))


def _retarget(project: Path) -> None:
    from tests.daytwo.test_upgrade import retarget

    retarget(project)


def test_an_upgrade_off_a_terminal_drains_nothing_and_its_change_set_is_what_it_then_does(fleet, as_real,
                                                                                            monkeypatch):
    monkeypatch.setenv("GPUFLEET_PROJECT", str(fleet))
    _retarget(fleet)
    pool_before, journal = pool_doc(fleet), daytwo_events(fleet)
    previous = ("--previous-bom", str(fleet / "previous-bom.yaml"))
    out = gpufleet(fleet, "upgrade", "-s", STACK, *previous)
    assert out.exit_code == 2 and "no one is at a terminal" in out.output, out.output
    assert pool_doc(fleet) == pool_before and daytwo_events(fleet) == journal  # nothing drained or journaled
    dry = gpufleet(fleet, "upgrade", "-s", STACK, "--dry-run", "--json", *previous)
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.stdout)
    assert (doc["kind"], doc["command"], doc["simulated"]) == ("changeset", "upgrade", False)
    drained = [c["target"] for c in doc["changes"] if c["action"] == "drain"]
    assert drained and pool_doc(fleet) == pool_before
    done = gpufleet(fleet, "upgrade", "-s", STACK, "--yes", "--json", *previous)
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    started = next(e for e in daytwo_events(fleet) if e["type"] == "upgrade" and e["to"] == "started")
    assert [g["slots"] for g in started["groups"]] == [
        [c["target"] for c in doc["changes"] if c["action"] == "drain" and c["target"] in g["slots"]]
        for g in started["groups"]]
    assert sorted(s for g in started["groups"] for s in g["slots"]) == sorted(drained)
    assert [g["nodes"] for g in report["groups"]] == [len(g["slots"]) for g in started["groups"]]
    assert len([n for n in doc["notes"] if n.startswith("group ")]) == len(report["groups"])
    assert report["stage"] == "finished"
