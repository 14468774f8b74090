"""`gpufleet upgrade` by reimage on a rolled-out simulated stack (crash40): the stack pins a new
`image.amiId` built from a new BOM, so every admitted node's instance is replaced from the new
image group by group (one replacement per slot in the simulated cloud's ledger), configured and
gated; a canary whose new image regresses busbw is reimaged back to its recorded previous AMI;
a kill at any point of a group's reimage resumes without replacing any slot twice."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpufleet.daytwo.context import open_day_two
from gpufleet.daytwo.upgrade_run import Upgrader
from gpufleet.project import load_project
from gpufleet.rollout.journal import KILL_ENV
from gpufleet.sim.installed import VERSION_FAULTS_FILE, VersionFaults
from tests.daytwo.fleet import STACK, daytwo_events, gpufleet, ledger, pool_doc, state_dir
from tests.daytwo.test_upgrade import admitted_slots, digests, retarget

NEW_AMI = "ami-0123456789abcdef0"


def reimage_to(project: Path, ami: str = NEW_AMI, nccl: str = "2.27.7") -> None:
    """A new BOM and the image built from it, pinned in the stack."""
    retarget(project, nccl=nccl)
    stack = project / "stacks" / f"Pulumi.{STACK}.yaml"
    stack.write_text(stack.read_text().replace("    bom: next-bom.yaml", f"    bom: next-bom.yaml\n    amiId: {ami}"))


def images(project: Path) -> dict[str, str | None]:
    """slot -> the AMI of its running instance, folded from the simulated cloud's ledger."""
    running: dict[str, tuple[str, str | None]] = {}
    for e in ledger(project):
        if e["event"] == "launch":
            running[e["slot"]] = (e["instance_id"], e.get("ami"))
        elif e["event"] in ("stop", "terminate") and running.get(e["slot"], ("",))[0] == e["instance_id"]:
            del running[e["slot"]]
    return {slot: ami for slot, (_iid, ami) in running.items()}


def reimages(project: Path) -> Counter:
    return Counter(e["slot"] for e in ledger(project) if e["event"] == "launch" and e["by"] == "reimage")


def upgrade(project: Path, *args: str):
    return gpufleet(project, "upgrade", "-s", STACK, *args)


def end_state(project: Path) -> dict:
    pool = pool_doc(project)
    for node in pool["nodes"].values():
        node.pop("record_digest", None)
    return {"pool": pool, "digests": digests(project), "images": images(project), "reimages": reimages(project)}


@pytest.fixture(autouse=True)
def _project_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_PROJECT", str(tmp_path / "project"))


@pytest.mark.slow  # ~10 s
def test_a_new_image_reimages_each_admitted_slot_once_in_grey_groups(fleet):
    held = admitted_slots(fleet)[-1]
    assert gpufleet(fleet, "pool", "blacklist", "-s", STACK, held, "--reason", "PDU alarm").exit_code == 0
    before = admitted_slots(fleet)
    old_images = images(fleet)
    old_ami = {old_images[s] for s in before}
    assert len(old_ami) == 1 and NEW_AMI not in old_ami  # the rollout booted what the program resolved
    reimage_to(fleet)
    out = upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml"))
    assert out.exit_code == 0, out.output
    started = next(e for e in daytwo_events(fleet) if e.get("to") == "started")
    assert started["method"] == "reimage" and started["target_ami"] == NEW_AMI and len(started["groups"]) > 2
    after = images(fleet)
    assert admitted_slots(fleet) == before
    assert {after[s] for s in before} == {NEW_AMI}
    assert {digests(fleet)[s] for s in before} == {started["target_digest"]}
    assert reimages(fleet) == Counter(before)  # one replacement per upgraded slot, none elsewhere
    assert after[held] == old_images[held] and held not in reimages(fleet)  # a blacklisted slot is left alone
    pool = pool_doc(fleet)["nodes"]
    for slot in before:  # the pool and the records know the new instance
        record = (state_dir(fleet) / "records" / f"{slot}.json").read_text()
        assert pool[slot]["instance_id"] in record
    previous = {s: p["ami"] for e in daytwo_events(fleet) if e.get("to") == "group-started"
                for s, p in e["previous"].items()}
    assert previous == {s: old_images[s] for s in before}  # on record before each group started
    report = (fleet / "reports" / STACK / "upgrade.json").read_text()
    assert NEW_AMI in report and '"reimaged"' in report


def test_a_failing_canary_is_reimaged_back_to_its_previous_ami_and_the_upgrade_halts(fleet):
    old_images = images(fleet)
    before = digests(fleet)
    reimage_to(fleet, nccl="2.27.7")
    VersionFaults(state_dir(fleet) / "sim" / VERSION_FAULTS_FILE).set("nccl", "2.27.7", 0.93)
    out = upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml"))
    assert out.exit_code == 3, out.output
    assert "canary group failed and was rolled back" in out.output
    up = [e for e in daytwo_events(fleet) if e["type"] == "upgrade"]
    assert [(e["to"], e.get("purpose")) for e in up] == [
        ("started", None), ("group-started", None), ("group-drained", None), ("reimage-requested", "upgrade"),
        ("reimaged", "upgrade"), ("group-gated", None), ("reimage-requested", "rollback"),
        ("reimaged", "rollback"), ("group-rolled-back", None), ("halted", None)]
    canary = up[0]["groups"][0]["slots"]
    assert up[6]["ami"] == old_images[canary[0]] and up[5]["result"] == "fail"
    assert images(fleet) == {**old_images}  # the canary back on its old image, nothing else touched
    assert reimages(fleet) == Counter({s: 2 for s in canary})  # there and back, once each
    assert digests(fleet) == before


@pytest.mark.slow  # ~12 s
def test_rollback_reimages_every_group_back_and_a_dry_run_says_what_it_would_reimage(fleet):
    old_images, before = images(fleet), digests(fleet)
    reimage_to(fleet)
    dry = upgrade(fleet, "--dry-run")
    admitted = admitted_slots(fleet)
    assert dry.exit_code == 0 and f"{len(admitted)} of them by reimage from {NEW_AMI}" in dry.output
    assert images(fleet) == old_images and not [e for e in daytwo_events(fleet) if e["type"] == "upgrade"]
    assert upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml")).exit_code == 0
    out = upgrade(fleet, "--rollback")
    assert out.exit_code == 0, out.output
    assert images(fleet) == old_images and digests(fleet) == before and admitted_slots(fleet) == admitted
    assert reimages(fleet) == Counter({s: 2 for s in admitted})


def test_an_image_only_change_reimages_without_asking_for_a_previous_bom(fleet):
    old_images, before = images(fleet), digests(fleet)
    stack = fleet / "stacks" / f"Pulumi.{STACK}.yaml"
    stack.write_text(stack.read_text().replace("    bom: images/bom.yaml", f"    bom: images/bom.yaml\n    amiId: {NEW_AMI}"))
    out = upgrade(fleet)
    assert out.exit_code == 0, out.output
    admitted = admitted_slots(fleet)
    assert {images(fleet)[s] for s in admitted} == {NEW_AMI} and digests(fleet) == before
    assert reimages(fleet) == Counter(admitted) and set(old_images) == set(images(fleet))
    assert "nothing to upgrade" in upgrade(fleet).output


class Crash(Exception):
    pass


@pytest.mark.slow  # ~15 s
def test_a_crash_after_the_provider_reimaged_but_before_the_journal_knew_resumes_without_a_second_one(
        fleet_base, tmp_path):
    clean = shutil.copytree(fleet_base, tmp_path / "clean", symlinks=True)
    reimage_to(clean)
    assert upgrade(clean, "--previous-bom", str(clean / "previous-bom.yaml")).exit_code == 0
    crashed = shutil.copytree(fleet_base, tmp_path / "project", symlinks=True)
    reimage_to(crashed)
    with open_day_two(STACK, "upgrade", project=load_project(crashed)) as d:
        up = Upgrader(d)
        provider = d.adapters.provisioner
        real = provider.reimage
        calls = []

        def reimage_then_die(slots, ami):
            result = real(slots, ami)
            calls.append([s.name for s in slots])
            if len(calls) == 2:  # the second group: the instances are replaced, "reimaged" never journaled
                raise Crash()
            return result
        provider.reimage = reimage_then_die
        assert up.start(crashed / "previous-bom.yaml") is None
        with pytest.raises(Crash):
            up.run()
    assert [e["to"] for e in daytwo_events(crashed)][-1] == "reimage-requested"
    out = upgrade(crashed, "--resume")
    assert out.exit_code == 0, out.output
    assert end_state(crashed) == end_state(clean)
    assert set(reimages(crashed).values()) == {1}


@pytest.mark.slow  # a child process killed and resumed, 15-25 s each
@pytest.mark.parametrize("kill_after", [4, 10])
def test_sigkill_mid_reimage_then_resume_gives_the_uninterrupted_end_state(fleet_base, tmp_path, kill_after):
    clean = shutil.copytree(fleet_base, tmp_path / "clean", symlinks=True)
    reimage_to(clean)
    assert upgrade(clean, "--previous-bom", str(clean / "previous-bom.yaml")).exit_code == 0
    killed = shutil.copytree(fleet_base, tmp_path / "project", symlinks=True)
    reimage_to(killed)
    gpufleet_bin = Path(sys.executable).parent / "gpufleet"
    run = subprocess.run([str(gpufleet_bin), "--project", str(killed), "upgrade", "-s", STACK, "--previous-bom",
                          str(killed / "previous-bom.yaml")], env={**os.environ, KILL_ENV: str(kill_after)},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -9, run.stdout + run.stderr  # SIGKILLed right after its kill_after-th append
    assert daytwo_events(killed)[-1]["to"] == "reimage-requested"  # the override asked for, not yet done
    out = upgrade(killed, "--resume")
    assert out.exit_code == 0, out.output
    assert end_state(killed) == end_state(clean)
    assert set(reimages(killed).values()) == {1}  # no slot replaced twice
    asked = [(e["group"], e["purpose"]) for e in daytwo_events(killed) if e.get("to") == "reimage-requested"]
    assert len(asked) == len(set(asked))  # nor asked for twice
