"""`gpufleet rollout`'s change set and confirmation (issue 23 item 2): on a real stack (`dev`, whose
journal is local, so nothing reaches AWS before the confirmation) off a terminal without --yes it
refuses with exit 2 before the lock, the journal or the provider is touched; --dry-run prints the
change set and exits 0; --yes, or a yes at a terminal, goes ahead. On the simulator (never asked)
the slots the change set lists are the slots the rollout then launches, fresh and resumed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner, Result

from gpufleet import changeset_command
from gpufleet.cli import main
from gpufleet.rollout.journal import Journal, LocalJournalStore
from tests.rollout.e2e import ledger_events
from tests.rollout.project import REPO, make_project

SCHEMA = json.loads((REPO / "docs" / "schemas" / "changeset.schema.json").read_text())
DEV_SLOTS = ["dev-b0000-n00000", "dev-b0001-n00001"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    p = make_project(tmp_path / "p")
    shutil.copy(REPO / "stacks" / "Pulumi.dev.yaml", p / "stacks")
    return p


@pytest.fixture
def ran(monkeypatch) -> list[str]:
    """The rollout itself (Pulumi, SSH): recorded instead of run, so `dev` never reaches AWS."""
    calls: list[str] = []
    monkeypatch.setattr("gpufleet.rollout.command._run", lambda spec, plan, project, stack, *a, **k: calls.append(stack))
    return calls


def rollout(project: Path, stack: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", stack, *args], input=input)


def _untouched(project: Path, stack: str) -> bool:
    return not (project / ".gpufleet" / stack).exists() or not any((project / ".gpufleet" / stack).iterdir())


def test_a_real_stack_off_a_terminal_without_yes_is_refused_before_anything(project, ran):
    out = rollout(project, "dev")
    assert out.exit_code == 2, out.output
    assert "no one is at a terminal" in out.output and "--yes" in out.output and "--dry-run" in out.output
    assert "launch        2 instance: dev-b0000-n00000,dev-b0001-n00001" in out.output
    assert "cost per hour: +$110.08" in out.output  # 2 x p5.48xlarge on demand in us-east-1, the shipped price
    assert ran == [] and _untouched(project, "dev")  # no lock, no journal, no provider


def test_a_dry_run_prints_the_change_set_and_exits_0_changing_nothing(project, ran):
    out = rollout(project, "dev", "--dry-run")
    assert out.exit_code == 0, out.output
    assert "change set: gpufleet rollout -s dev" in out.output and "create        1 storage: fsx-lustre" in out.output
    assert "batch 1 (canary): 2 slots" in out.output and "dry run: nothing was provisioned" in out.output
    assert ran == [] and _untouched(project, "dev")
    js = CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", "dev", "--dry-run", "--json"])
    assert js.exit_code == 0, js.output
    doc = json.loads(js.stdout)  # the change set alone on stdout; the batches went to stderr
    jsonschema.validate(doc, SCHEMA)
    assert (doc["kind"], doc["stack"], doc["simulated"]) == ("changeset", "dev", False)
    assert [c["target"] for c in doc["changes"] if c["action"] == "launch"] == DEV_SLOTS
    assert doc["usd_per_hour_delta"] == pytest.approx(110.08)


def test_yes_goes_ahead_without_asking(project, ran):
    out = rollout(project, "dev", "--yes")
    assert out.exit_code == 0, out.output
    assert ran == ["dev"] and "no one is at a terminal" not in out.output


def test_at_a_terminal_the_person_answers(project, ran, monkeypatch):
    monkeypatch.setattr(changeset_command, "at_a_terminal", lambda: True)
    no = rollout(project, "dev", input="n\n")
    assert no.exit_code == 1 and "Apply these changes to stack dev" in no.output, no.output
    assert "changed nothing" in no.output and ran == [] and _untouched(project, "dev")
    yes = rollout(project, "dev", input="y\n")
    assert yes.exit_code == 0, yes.output
    assert ran == ["dev"]


def test_an_unfinished_journal_without_resume_is_refused_before_the_change_set(project, ran):
    path = project / ".gpufleet" / "dev" / "journal.jsonl"
    path.parent.mkdir(parents=True)
    journal = Journal(LocalJournalStore(path), "dev")
    journal.load()
    journal.append({"type": "rollout", "to": "started", "batches": [1]})
    journal.close()
    before = path.read_bytes()
    out = rollout(project, "dev")
    assert out.exit_code == 2 and "--resume" in out.output and "change set" not in out.output, out.output
    resumed = rollout(project, "dev", "--resume")  # what is left is shown, then refused off a terminal
    assert resumed.exit_code == 2 and "launch        2 instance" in resumed.output, resumed.output
    assert path.read_bytes() == before and not (path.parent / "lock").exists() and ran == []


def _launched(project: Path, stack: str, by: str = "provision") -> list[str]:
    return [e["slot"] for e in ledger_events(project, stack) if e["event"] == "launch" and e.get("by") == by]


def _planned(project: Path, stack: str, *args: str) -> dict:
    out = CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", stack, "--dry-run", "--json", *args])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_on_the_simulator_the_change_set_is_what_the_rollout_then_launches(tmp_path):
    project = make_project(tmp_path / "p")
    first = _planned(project, "crash40", "--until-batch", "2")
    assert first["simulated"] is True and first["usd_per_hour_delta"] is None  # nothing is bought
    planned = [c["target"] for c in first["changes"] if c["action"] == "launch"]
    out = rollout(project, "crash40", "--until-batch", "2")  # off a terminal, no --yes: a simulated stack never asks
    assert out.exit_code == 0, out.output
    assert "change set: gpufleet rollout -s crash40 (simulated stack" in out.output
    assert _launched(project, "crash40") == planned
    spares = next(n for n in first["notes"] if "spare budget" in n)
    replaced = _launched(project, "crash40", "replace")
    assert len(replaced) <= int(spares.split("up to ")[1].split()[0]) and set(replaced) <= set(planned)
    rest = _planned(project, "crash40")  # what the journal left: the batches after 2
    again = [c["target"] for c in rest["changes"] if c["action"] == "launch"]
    assert again and not set(again) & set(planned)
    done = rollout(project, "crash40", "--resume")
    assert done.exit_code == 0, done.output
    assert _launched(project, "crash40") == planned + again
    assert _planned(project, "crash40")["empty"] is True  # finished: nothing left to change


def test_a_dry_run_of_a_restart_shows_everything_running_again(tmp_path):
    project = make_project(tmp_path / "p")
    assert rollout(project, "crash40", "--until-batch", "1").exit_code == 0
    left = _planned(project, "crash40")
    again = _planned(project, "crash40", "--restart")
    everything = [c["target"] for c in _planned(make_project(tmp_path / "q"), "crash40")["changes"]
                  if c["action"] == "launch"]
    assert [c["target"] for c in again["changes"] if c["action"] == "launch"] == everything
    assert len([c for c in left["changes"] if c["action"] == "launch"]) < len(everything)
