"""`gpufleet destroy` through the CLI.

- A real (non-simulated) stack: off a terminal without --yes it refuses (exit 2) before any port is
  touched and journals nothing; --dry-run prints the change set; --yes runs the steps; a failed step
  exits 1 naming it, and the rerun resumes there. The world and ports are fakes (`open_side` is the
  one seam), the command, journal, change set, lock and audit log are real.
- A simulated stack end to end: a rollout, then destroy (it never asks): the change set's targets are
  what the simulated cloud's ledger then terminates, the world and pool are emptied, journal and
  audit records are written, a rerun finds nothing to destroy, and a new rollout starts fresh.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.lifecycle import destroy_plan as dp
from gpufleet.lifecycle import destroy_run as dr
from gpufleet.lifecycle.destroy_side import Side
from gpufleet.ops import audit
from tests.lifecycle.test_destroy_run import FS, NODES, SLOTS, Cloud, FakeJobs, FakePool, Saver

REPO = Path(__file__).resolve().parents[2]


def _project(root: Path, stack_text: str, name: str = "dev") -> Path:
    (root / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for d in ("images", "playbooks"):
        (root / d).symlink_to(REPO / d)
    (root / "stacks" / f"Pulumi.{name}.yaml").write_text(stack_text)
    return root


def _cli(project: Path, *args: str):
    return CliRunner().invoke(main, ["--project", str(project), *args])


def _valid(doc: dict) -> dict:
    """The document against its kind's JSON Schema under docs/schemas/ (gpufleet.docs_gen)."""
    import jsonschema

    jsonschema.validate(doc, json.loads((REPO / "docs" / "schemas" / f"{doc['kind']}.schema.json").read_text()))
    return doc


class FakeSide:
    """open_side's stand-in: a real-looking world and the fake ports of test_destroy_run."""

    def __init__(self, fail_backup: bool = False) -> None:
        self.log: list = []
        self.opened = 0
        self.pool = FakePool(self.log)
        self.cloud = Cloud(self.log)
        self.saver = Saver(self.log)
        if fail_backup:
            def refuse(fs):
                self.log.append(("backup-refused", fs.fs_id))
                raise dr.GpufleetError("CreateBackup refused: ServiceLimitExceeded")
            self.saver.backup = refuse  # type: ignore[method-assign]

    def __call__(self, spec, project, stack, store, *, jobs_deadline_s, warn=None) -> Side:
        self.opened += 1
        from gpufleet.lifecycle.destroy_side import drainable, forgetter

        world = dp.World(simulated=False, nodes=tuple(n for n in NODES if n.slot in self.cloud.running),
                         pool_slots=drainable(self.pool), file_systems=(FS,),
                         resources=(dp.StackResource("urn:pulumi:dev::gpufleet::aws:ec2/vpc:Vpc::dev-vpc",
                                                     "aws:ec2/vpc:Vpc"),), journal=store.exists())
        ports = dr.Ports(pool=self.pool, jobs=FakeJobs(self.pool, self.log), terminator=self.cloud,
                         storage=self.saver, remover=self.cloud,
                         forget=forgetter(project.state_dir(stack), stack, store), file_systems={FS.fs_id: FS})
        return Side(world, ports)


@pytest.fixture
def real(tmp_path, monkeypatch):
    project = _project(tmp_path / "p", (REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    side = FakeSide()
    monkeypatch.setattr("gpufleet.lifecycle.destroy_side.open_side", side)
    return project, side


def test_off_a_terminal_without_yes_a_real_stack_is_refused_before_anything_is_touched(real):
    project, side = real
    result = _cli(project, "destroy", "-s", "dev")
    assert result.exit_code == 2, result.output
    assert "no one is at a terminal to confirm: nothing was changed" in result.output
    assert "terminate     3 instance" in result.output  # the change set was shown first
    assert side.log == []  # read, never changed
    assert not (project / ".gpufleet" / "dev" / "destroy").exists()  # nothing journaled
    assert not (project / ".gpufleet" / "dev" / audit.FILE).exists()


def test_dry_run_prints_the_change_set_as_json_and_changes_nothing(real):
    project, side = real
    result = _cli(project, "destroy", "-s", "dev", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    doc = _valid(json.loads(result.stdout))
    assert doc["kind"] == "changeset" and doc["command"] == "destroy" and doc["simulated"] is False
    by = {(s["action"], s["kind"]): s for s in doc["summary"]}
    assert by[("terminate", "instance")]["count"] == 3 and by[("drain", "pool-node")]["count"] == 3
    assert by[("backup", "storage")]["targets"] == "gpu-fsx (fs-0aaa)"
    assert by[("delete", "stack-resource")]["targets"] == "dev-vpc"
    assert doc["usd_per_hour_delta"] < 0  # p5.48xlarge has a sourced price: 3 of them stop costing
    assert side.log == []


def test_yes_runs_every_step_and_what_happens_is_what_the_change_set_said(real):
    project, side = real
    shown = json.loads(_cli(project, "destroy", "-s", "dev", "--dry-run", "--json").stdout)
    result = _cli(project, "destroy", "-s", "dev", "--yes", "--json")
    assert result.exit_code == 0, result.output
    doc = _valid(json.loads(result.stdout))
    assert doc["kind"] == "destroy" and doc["destroyed"] is True and doc["terminated"] == 3
    said = {c["target"] for c in shown["changes"] if c["action"] == "terminate"}
    done = {s for e in side.log if e[0] == "terminate" for s in ("gpu-b0000-n00000", "gpu-b0000-n00001",
                                                                "gpu-b0001-n00002") if NODES[SLOTS.index(s)].instance_id in e[2]}
    assert said == done == set(SLOTS)
    assert {c["target"] for c in shown["changes"] if c["action"] == "drain"} == set(next(e[1] for e in side.log
                                                                                          if e[0] == "drain"))
    assert ("backup", "fs-0aaa") in side.log
    last = list(audit.read(project / ".gpufleet" / "dev"))[-1]
    assert (last["what"], last["why"], last["details"]["terminated"]) == ("destroy", "cluster destroyed", 3)
    assert (project / ".gpufleet" / "dev" / "destroyed.json").exists()
    archived = list((project / ".gpufleet" / "dev" / "destroy").glob("journal.*.jsonl"))
    assert len(archived) == 1 and '"to":"finished"' in archived[0].read_text()


def test_a_failed_step_exits_1_naming_it_and_the_rerun_resumes_there(tmp_path, monkeypatch):
    project = _project(tmp_path / "p", (REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    side = FakeSide(fail_backup=True)
    monkeypatch.setattr("gpufleet.lifecycle.destroy_side.open_side", side)
    first = _cli(project, "destroy", "-s", "dev", "--yes")
    assert first.exit_code == 1, first.output
    assert "destroy step storage-fs-0aaa failed" in first.output and "resumes at storage-fs-0aaa" in first.output
    assert ("remove", ("urn:pulumi:dev::gpufleet::aws:ec2/vpc:Vpc::dev-vpc", "urn:fsx")) not in side.log
    assert list(audit.read(project / ".gpufleet" / "dev"))[-1]["why"].startswith("step failed")
    # fixed: the rerun resumes at the storage step; the nodes terminated before are not asked for again
    side.saver.backup = Saver(side.log).backup  # type: ignore[method-assign]
    side.log.clear()
    again = _cli(project, "destroy", "-s", "dev", "--yes")
    assert again.exit_code == 0, again.output
    assert "resuming the destroy of dev at step storage-fs-0aaa" in again.output
    assert [e[0] for e in side.log] == ["backup", "remove"]


# --- a simulated stack, end to end ------------------------------------------------------------------

SIM_DEV = (REPO / "stacks" / "Pulumi.dev.yaml").read_text().replace("    type: slurm\n", "    type: sim\n") + (
    "  gpufleet:simulator:\n    seed: 3\n")


def _ledger(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # two simulated rollouts of the dev stack through the CLI (~5 s each)
def test_destroy_on_a_simulated_stack_empties_its_world_and_a_new_rollout_starts_fresh(tmp_path):
    project = _project(tmp_path / "p", SIM_DEV)
    sd = project / ".gpufleet" / "dev"
    assert _cli(project, "rollout", "-s", "dev").exit_code == 0
    launched = {e["slot"]: e["instance_id"] for e in _ledger(sd / "sim" / "ledger.jsonl") if e["event"] == "launch"}
    shown = json.loads(_cli(project, "destroy", "-s", "dev", "--dry-run", "--json").stdout)
    assert shown["simulated"] is True and (sd / "sim").exists()  # the dry run changed nothing

    result = _cli(project, "destroy", "-s", "dev", "--json")  # simulated: never asks, no --yes needed
    assert result.exit_code == 0, result.output
    doc = _valid(json.loads(result.stdout))
    assert doc["destroyed"] is True and doc["terminated"] == len(launched) == 2
    # what the change set said is what the simulated cloud did
    [moved] = [p for p in sd.glob("destroyed.*") if p.is_dir()]
    ended = {e["slot"]: e["instance_id"] for e in _ledger(moved / "sim" / "ledger.jsonl")
             if e["event"] == "terminate" and e.get("by") == "destroy"}
    assert ended == launched
    assert {c["target"] for c in shown["changes"] if c["action"] == "terminate"} == set(ended)
    assert {c["target"] for c in shown["changes"] if c["action"] == "drain"} == set(launched)
    # the world is empty: no simulated cloud, pool file, records or rollout journal left in place
    for name in ("sim", "pool.json", "records", "journal.jsonl"):
        assert not (sd / name).exists(), name
    pool = json.loads((moved / "pool.json").read_text())
    assert pool["nodes"] == {} and sorted(pool["released"]) == sorted(launched)  # drained, then released
    assert len(list(sd.glob("journal.*.jsonl"))) == 1  # the rollout journal, archived
    whats = [r["what"] for r in audit.read(sd)]
    assert whats == ["rollout", "destroy"]
    view = _cli(project, "pool", "-s", "dev", "--json")  # not an empty pool: no cluster at all
    assert view.exit_code == 1 and "stack dev has no cluster: destroyed at" in view.output, view.output

    # a rerun is a no-op, and records nothing
    again = _cli(project, "destroy", "-s", "dev")
    assert again.exit_code == 0 and "nothing to destroy" in again.output
    nothing = _valid(json.loads(_cli(project, "destroy", "-s", "dev", "--json").stdout))
    assert (nothing["destroyed"], nothing["steps"]) == (False, [])
    assert [r["what"] for r in audit.read(sd)] == whats

    # a new rollout starts fresh: a new simulated cloud, every slot launched again
    fresh = _cli(project, "rollout", "-s", "dev")
    assert fresh.exit_code == 0, fresh.output
    relaunched = {e["slot"] for e in _ledger(sd / "sim" / "ledger.jsonl") if e["event"] == "launch"}
    assert relaunched == set(launched)
    assert not (sd / "destroyed.json").exists() and len(list((sd / "destroy").glob("destroyed.*.json"))) == 1
    shown_again = _cli(project, "pool", "-s", "dev", "--json")
    assert shown_again.exit_code == 0 and json.loads(shown_again.stdout)["counts"]["admitted"] == 2


@pytest.mark.slow  # the shipped 1,000-GPU `local` stack: a rollout (~7 s) and its destroy (~1 s)
def test_destroy_on_the_shipped_local_stack_after_its_rollout(tmp_path):
    from tests.rollout.project import make_project

    project = make_project(tmp_path / "p")
    sd = project / ".gpufleet" / "local"
    assert _cli(project, "rollout", "-s", "local").exit_code == 0
    events = _ledger(sd / "sim" / "ledger.jsonl")  # the instances running: launched, not stopped or terminated
    running = {e["instance_id"] for e in events if e["event"] == "launch"} - {
        e["instance_id"] for e in events if e["event"] in ("stop", "terminate")}
    admitted = [s for s, n in json.loads((sd / "pool.json").read_text())["nodes"].items() if n["state"] == "admitted"]
    result = _cli(project, "destroy", "-s", "local", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["terminated"] == len(running) and doc["drained"] == len(admitted) >= 120
    batches = [s["id"] for s in doc["steps"] if s["id"].startswith("terminate-")]
    assert batches == sorted(batches, reverse=True) and len(batches) > 1  # batch by batch, the last first
    assert not (sd / "sim").exists() and not (sd / "pool.json").exists()
    [moved] = [p for p in sd.glob("destroyed.*") if p.is_dir()]
    ended = {e["instance_id"] for e in _ledger(moved / "sim" / "ledger.jsonl") if e.get("by") == "destroy"}
    assert ended == running
    assert "nothing to destroy" in _cli(project, "destroy", "-s", "local").output
