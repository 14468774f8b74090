"""`gpufleet upgrade` on a rolled-out simulated stack (crash40): grey groups keep each partition's
share of units, every node ends on the new BOM; a BOM whose NCCL regresses busbw fails the canary,
which is rolled back and re-admitted on the old version with nothing else touched (exit 3); a
compatibility violation or a previous version not on record is refused before any drain (exit 2);
--rollback; a drain held by running work; crashes at random points resume to the same end state."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from gpufleet.daytwo.context import open_day_two
from gpufleet.daytwo.upgrade_plan import limits
from gpufleet.daytwo.upgrade_run import Upgrader
from gpufleet.pool.command import free_units
from gpufleet.project import load_project
from gpufleet.sim.installed import VERSION_FAULTS_FILE, VersionFaults
from tests.daytwo.fleet import STACK, daytwo_events, gpufleet, pool_doc, set_busy, state_dir
from tests.rollout.project import make_project


def retarget(project: Path, nccl: str = "2.27.7", ofi: str = "1.16.3") -> str:
    """Point the stack at a new BOM (the old one kept as previous-bom.yaml); returns the new path."""
    text = (project / "images" / "bom.yaml").read_text()
    (project / "previous-bom.yaml").write_text(text)
    new = text.replace('version: "2.27.5"', f'version: "{nccl}"').replace('    version: "1.16.0"', f'    version: "{ofi}"')
    (project / "next-bom.yaml").write_text(new)
    stack = project / "stacks" / f"Pulumi.{STACK}.yaml"
    stack.write_text(stack.read_text().replace("bom: images/bom.yaml", "bom: next-bom.yaml"))
    return "next-bom.yaml"


def digests(project: Path) -> dict[str, str]:
    return {p.stem: json.loads(p.read_text())["bom_digest"] for p in (state_dir(project) / "records").glob("*.json")}


def admitted_slots(project: Path) -> list[str]:
    return sorted(s for s, n in pool_doc(project)["nodes"].items() if n["state"] == "admitted")


def upgrade(project: Path, *args: str):
    return gpufleet(project, "upgrade", "-s", STACK, *args)


@pytest.fixture(autouse=True)
def _project_env(monkeypatch, tmp_path):
    """The in-process API calls find the project as the CLI's --project would (the Pulumi program
    under mocks reads the stack's BOM through the current project)."""
    monkeypatch.setenv("GPUFLEET_PROJECT", str(tmp_path / "project"))


def test_grey_groups_keep_each_partition_in_service_and_end_on_the_new_bom(fleet):
    retarget(fleet)
    before = admitted_slots(fleet)
    old = set(digests(fleet)[s] for s in before)
    project = load_project(fleet)
    seen = []
    with open_day_two(STACK, "upgrade", project=project) as d:
        base = free_units(d.plan, d.pool.state())
        allowed = limits(d.plan, d.spec.upgrade)

        def watch(what, g):
            seen.append((what, g.number, free_units(d.plan, d.pool.state())))

        up = Upgrader(d, on_step=watch)
        assert up.start(fleet / "previous-bom.yaml") is None
        outcome = up.run()
    assert not outcome.halted and len(outcome.groups_done) == len(outcome.state.groups) > 2
    drained = [free for what, _n, free in seen if what == "drained"]
    assert len(drained) == len(outcome.state.groups)
    for free in drained:  # the moment a group is out of service
        for partition, units in free.items():
            assert units >= base[partition] - allowed[partition], (partition, units)
    assert min(sum(f.values()) for f in drained) < sum(base.values())  # something really was out
    after = digests(fleet)
    assert admitted_slots(fleet) == before
    assert {after[s] for s in before} == {outcome.state.target_digest} and outcome.state.target_digest not in old
    records = [json.loads((state_dir(fleet) / "records" / f"{s}.json").read_text()) for s in before]
    assert {r["busbw"]["multi_node_gbs"] != {} for r in records} == {True}  # re-baselined with partners
    report = json.loads((fleet / "reports" / STACK / "upgrade.json").read_text()) if (
        fleet / "reports" / STACK / "upgrade.json").exists() else None
    assert report is None  # the API does not write reports; the command does (next test)


@pytest.mark.slow  # the CLI upgrades the fleet twice over, ~12 s
def test_the_command_upgrades_reports_and_then_has_nothing_to_do(fleet):
    retarget(fleet)
    out = upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml"))
    assert out.exit_code == 0, out.output
    report = json.loads((fleet / "reports" / STACK / "upgrade.json").read_text())
    assert report["stage"] == "finished" and all(g["stage"] == "admitted" for g in report["groups"])
    assert all(g["before"]["intra_node_gbs"] and g["after"]["intra_node_gbs"] for g in report["groups"])
    out = upgrade(fleet)
    assert out.exit_code == 0 and "nothing to upgrade: all 40 admitted node(s) already run" in out.output


def test_before_any_rollout_the_upgrade_says_no_node_is_admitted_yet(tmp_path):
    project = make_project(tmp_path / "project")
    for args in (("--dry-run",), ()):
        out = upgrade(project, *args)
        assert out.exit_code == 0, out.output
        assert f"{STACK} has no admitted node yet" in out.output and "already run" not in out.output


def test_a_regressing_nccl_fails_the_canary_which_is_rolled_back_and_nothing_else_is_touched(fleet):
    retarget(fleet, nccl="2.27.7")
    VersionFaults(state_dir(fleet) / "sim" / VERSION_FAULTS_FILE).set("nccl", "2.27.7", 0.93)  # above the SKU floor, 7% under its own baselines
    before = digests(fleet)
    pool_before = pool_doc(fleet)
    out = upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml"))
    assert out.exit_code == 3, out.output
    assert "canary group failed and was rolled back" in out.output and "busbw median" in out.output
    up = [e for e in daytwo_events(fleet) if e["type"] == "upgrade"]
    canary = up[0]["groups"][0]["slots"]
    assert [e["to"] for e in up] == ["started", "group-started", "group-drained", "group-gated", "group-rolled-back",
                                     "halted"]
    assert up[3]["result"] == "fail"
    assert digests(fleet) == before  # the canary back on its old BOM, every other node never touched
    pool_after = pool_doc(fleet)
    for slot, node in pool_after["nodes"].items():
        assert node["state"] == pool_before["nodes"][slot]["state"], slot
        if slot not in canary:
            assert node == pool_before["nodes"][slot], slot
    installed = json.loads((state_dir(fleet) / "sim" / "installed.json").read_text())
    new_digest = up[0]["target_digest"]
    assert not [i for i, e in installed.items() if e["bom_digest"] == new_digest]  # nowhere left on the new BOM


def test_a_bom_breaking_the_compatibility_rules_is_refused_before_any_drain(fleet):
    retarget(fleet, nccl="2.28.3", ofi="1.16.0")  # aws-ofi-nccl 1.16.0 supports NCCL up to 2.27.5
    pool_before = pool_doc(fleet)
    out = upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml"))
    assert out.exit_code == 2 and "BOM_NCCL_RANGE" in out.output
    assert pool_doc(fleet) == pool_before and not [e for e in daytwo_events(fleet) if e["type"] == "upgrade"]


def test_a_previous_bom_not_on_record_is_asked_for_before_any_drain(fleet):
    """A pool rolled out before the rollout kept its BOMs: no copy on record, so --previous-bom is asked for."""
    retarget(fleet)
    shutil.rmtree(state_dir(fleet) / "upgrade" / "boms")
    pool_before = pool_doc(fleet)
    out = upgrade(fleet)
    assert out.exit_code == 2 and "--previous-bom" in out.output and "not on record" in out.output
    assert pool_doc(fleet) == pool_before


def _edit_bom_in_place(fleet) -> tuple[Path, str]:
    """images/bom.yaml edited as a user would (NCCL 2.27.7 with the aws-ofi-nccl that supports it)."""
    images = fleet / "images"  # the throwaway project links the repository's images/: edit a copy
    shared = images.resolve()
    images.unlink()
    shutil.copytree(shared, images)
    bom = images / "bom.yaml"
    old_text = bom.read_text()
    bom.write_text(old_text.replace('version: "2.27.5"', 'version: "2.27.7"').replace('    version: "1.16.0"',
                                                                                     '    version: "1.16.3"'))
    return bom, old_text


@pytest.mark.slow  # the CLI upgrades all 40 nodes, then audits them
def test_rollout_edit_the_bom_upgrade_then_the_audit_is_clean(fleet):
    _edit_bom_in_place(fleet)
    out = upgrade(fleet)
    assert out.exit_code == 0, out.output
    audit = gpufleet(fleet, "audit", "-s", STACK)
    assert audit.exit_code == 0, audit.output


def test_the_bom_edited_in_place_upgrades_and_rolls_back_on_the_rollouts_record(fleet):
    """The user's flow: rollout, edit images/bom.yaml, `gpufleet upgrade` with no --previous-bom; a
    seeded regression fails the canary, which goes back to the BOM the rollout kept."""
    before = digests(fleet)
    _bom, old_text = _edit_bom_in_place(fleet)
    VersionFaults(state_dir(fleet) / "sim" / VERSION_FAULTS_FILE).set("nccl", "2.27.7", 0.93)
    out = upgrade(fleet)
    assert out.exit_code == 3, out.output
    assert "canary group failed and was rolled back" in out.output
    assert digests(fleet) == before
    started = next(e for e in daytwo_events(fleet) if e.get("to") == "started")
    (kept,) = started["previous"].values()
    assert (state_dir(fleet) / kept).read_text() == old_text  # the exact text the rollout applied


def test_rollback_returns_every_upgraded_group_to_the_previous_version(fleet):
    retarget(fleet)
    before, admitted_before = digests(fleet), admitted_slots(fleet)
    assert upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml")).exit_code == 0
    assert digests(fleet) != before
    out = upgrade(fleet, "--rollback")
    assert out.exit_code == 0, out.output
    assert digests(fleet) == before and admitted_slots(fleet) == admitted_before  # every node back in service


def test_a_drain_held_by_running_work_halts_with_the_holding_nodes_and_returns_them(fleet):
    job = "train/job/4242 llm-pretrain | step 3 (alice)"
    retarget(fleet)
    project = load_project(fleet)
    with open_day_two(STACK, "upgrade", project=project) as d:
        up = Upgrader(d, sleep=lambda s: ticks.append(s), monotonic=lambda: 1000.0 * len(ticks), poll_s=1)
        ticks: list[float] = []
        assert up.start(fleet / "previous-bom.yaml") is None
        first = up.state.groups[1].slots[0]
        pool = d.adapters.pool
        register = pool.register_pending

        def drain_under_a_running_job(nodes):
            register(nodes)
            set_busy(fleet, first, work=job)  # the drain stops new work; the job already there keeps running

        pool.register_pending = drain_under_a_running_job
        outcome = up.run()
    assert outcome.halted and f"running work holds {job} on {first};" in outcome.message
    assert pool_doc(fleet)["nodes"][first]["state"] == "admitted"  # returned unchanged


class Crash(Exception):
    pass


def _end_state(project: Path) -> dict:
    pool = pool_doc(project)
    for node in pool["nodes"].values():
        node.pop("record_digest", None)
    return {"pool": pool, "digests": digests(project)}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_crashes_at_random_points_resume_to_the_same_end_state(fleet_base, tmp_path, seed):
    clean = shutil.copytree(fleet_base, tmp_path / "clean", symlinks=True)
    retarget(clean)
    assert upgrade(clean, "--previous-bom", str(clean / "previous-bom.yaml")).exit_code == 0
    events = len([e for e in daytwo_events(clean) if e["type"] == "upgrade"])
    crashed = shutil.copytree(fleet_base, tmp_path / "project", symlinks=True)
    retarget(crashed)
    rng = random.Random(seed)
    kills = sorted(rng.sample(range(1, events), 3))
    project = load_project(crashed)
    done = 0
    for kill in kills:
        with open_day_two(STACK, "upgrade", project=project) as d:
            up = Upgrader(d)

            def crash(n: int) -> None:
                if done + n == kill:
                    raise Crash()
            d.journal.on_append = crash
            with pytest.raises(Crash):
                if up.state is None:
                    up.start(crashed / "previous-bom.yaml")
                up.run()
        done = len([e for e in daytwo_events(crashed) if e["type"] == "upgrade"])
    out = upgrade(crashed, "--resume")
    assert out.exit_code == 0, out.output
    assert _end_state(crashed) == _end_state(clean)
    drains = [e for e in daytwo_events(crashed) if e.get("to") == "group-drained"]
    assert len(drains) == len({e["group"] for e in drains})  # no group drained twice


@pytest.mark.slow  # a child process killed and resumed, 7-8 s each
@pytest.mark.parametrize("kill_after", [2, 7])
def test_sigkill_mid_upgrade_then_resume_gives_the_uninterrupted_end_state(fleet_base, tmp_path, kill_after):
    import os
    import subprocess
    import sys

    from gpufleet.rollout.journal import KILL_ENV

    clean = shutil.copytree(fleet_base, tmp_path / "clean", symlinks=True)
    retarget(clean)
    assert upgrade(clean, "--previous-bom", str(clean / "previous-bom.yaml")).exit_code == 0
    killed = shutil.copytree(fleet_base, tmp_path / "project", symlinks=True)
    retarget(killed)
    gpufleet_bin = Path(sys.executable).parent / "gpufleet"
    run = subprocess.run([str(gpufleet_bin), "--project", str(killed), "upgrade", "-s", STACK, "--previous-bom",
                          str(killed / "previous-bom.yaml")], env={**os.environ, KILL_ENV: str(kill_after)},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -9, run.stdout + run.stderr  # SIGKILLed right after its kill_after-th append
    assert len(daytwo_events(killed)) == kill_after
    out = upgrade(killed)
    assert out.exit_code == 2 and "--resume" in out.output  # an unfinished upgrade is never restarted silently
    out = upgrade(killed, "--resume")
    assert out.exit_code == 0, out.output
    assert _end_state(killed) == _end_state(clean)


def test_a_rollback_held_by_running_work_keeps_the_group_upgraded_and_can_be_rerun(fleet):
    retarget(fleet)
    before = digests(fleet)
    assert upgrade(fleet, "--previous-bom", str(fleet / "previous-bom.yaml")).exit_code == 0
    upgraded = digests(fleet)
    with open_day_two(STACK, "upgrade", project=load_project(fleet)) as d:
        ticks: list[float] = []
        up = Upgrader(d, sleep=lambda s: ticks.append(s), monotonic=lambda: 1000.0 * len(ticks), poll_s=1)
        last = up.state.groups[max(up.state.groups)].slots[0]
        pool = d.adapters.pool
        register = pool.register_pending

        def drain_under_a_running_job(nodes):
            register(nodes)
            set_busy(fleet, last)

        pool.register_pending = drain_under_a_running_job
        outcome = up.rollback()
    assert outcome.halted and "held" in outcome.message and last in outcome.message
    assert digests(fleet) == upgraded and pool_doc(fleet)["nodes"][last]["state"] == "admitted"
    set_busy(fleet, last, False)
    out = upgrade(fleet)  # an unfinished rollback continues
    assert out.exit_code == 0, out.output
    up = [e for e in daytwo_events(fleet) if e["type"] == "upgrade"]
    groups = {g["number"] for g in up[0]["groups"]}
    assert {e["group"] for e in up if e["to"] == "group-rolled-back"} == groups and up[-1]["to"] == "rolled-back"
    assert digests(fleet) == before  # every group back on the previous BOM, not only the one held
