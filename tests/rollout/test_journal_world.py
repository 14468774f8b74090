"""The damaged journals of issue 21 item 6 on the shipped `local` stack, through `gpufleet rollout`
and the simulator's own world (its instances and ledger): a journal copied into another project is
refused (it reported "complete 125/125" with no cloud behind it), and a journal cut by hand to its
first 40 lines resumes without blacklisting a healthy slot (it blacklisted 3)."""

from __future__ import annotations

import shutil

import pytest

from tests.rollout.e2e import journal_state, ledger_events, rollout
from tests.rollout.project import make_project, seed_program_cache

pytestmark = pytest.mark.slow
STACK = "local"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("ref") / "p")
    result = rollout(project, STACK)
    assert result.exit_code == 0, result.output
    return project


def test_a_journal_copied_into_another_project_is_refused(tmp_path, reference):
    other = make_project(tmp_path / "other")
    seed_program_cache(reference, other, STACK)
    (other / ".gpufleet" / STACK).mkdir(parents=True, exist_ok=True)
    shutil.copy(reference / ".gpufleet" / STACK / "journal.jsonl", other / ".gpufleet" / STACK / "journal.jsonl")
    result = rollout(other, STACK)
    assert result.exit_code == 2, result.output
    assert "the journal names 125 instance(s) and the provider runs none of them" in result.output
    assert "complete" not in result.output and not (other / "reports" / STACK / "rollout.json").exists()


def test_a_journal_cut_to_40_lines_blacklists_no_healthy_slot(tmp_path, reference):
    project = tmp_path / "cut"
    shutil.copytree(reference, project, symlinks=True)
    path = project / ".gpufleet" / STACK / "journal.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:40]))
    result = rollout(project, STACK, "--resume")
    assert result.exit_code == 0, result.output
    state, ref = journal_state(project, STACK), journal_state(reference, STACK)
    assert state.finished and not [s for s, n in state.nodes.items() if n.blacklisted]
    admitted = {s for s, n in state.nodes.items() if n.stage.value == "admitted"}
    assert admitted == {s for s, n in ref.nodes.items() if n.stage.value == "admitted"} and len(admitted) == 125
    events = ledger_events(project, STACK)
    launches = [e["slot"] for e in events if e["event"] == "launch"]
    stops = [e["slot"] for e in events if e["event"] in ("stop", "terminate")]
    assert len(launches) - len(stops) == len(set(launches)) == 125  # one running instance per slot
    assert launches == [e["slot"] for e in ledger_events(reference, STACK) if e["event"] == "launch"]
