"""Grow and shrink a rolled-out simulated stack by whole blocks (issue 23 item 1), end to end through
`gpufleet rollout`: the new blocks go through the same gates as new batches and no existing slot
or instance moves; a lowered target drains, releases and terminates the emptiest whole blocks,
journaled per node, and resumes after a kill mid-shrink."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpufleet.sim.provisioner import SimProvisioner

from tests.rollout.e2e import journal_state, ledger_events, rollout

REPO = Path(__file__).resolve().parents[2]

# the dev stack, simulated: 2-node blocks (16-GPU units on 8-GPU nodes), no seeded fault
BASE = (REPO / "stacks" / "Pulumi.dev.yaml").read_text().replace("    type: slurm\n", "    type: sim\n") \
    .replace("    unitGpus: 8\n", "    unitGpus: 16\n").replace("      units: 2\n", "      units: 1\n") \
    .replace("    batchSize: 1\n", "    batchSize: 2\n") \
    + "  gpufleet:simulator:\n    seed: 1\n  gpufleet:upgrade:\n    drainTimeoutS: 30\n"


def stack(gpus: int) -> str:
    return BASE.replace("    targetGpus: 16\n", f"    targetGpus: {gpus}\n")


class Crash(BaseException):
    """Stands in for a kill inside the test process: nothing catches it."""


def project_with(tmp_path: Path, gpus: int) -> Path:
    project = tmp_path / "p"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", project / "Pulumi.yaml")
    for name in ("images", "playbooks"):
        (project / name).symlink_to(REPO / name)
    (project / "stacks" / "Pulumi.dev.yaml").write_text(stack(gpus))
    return project


def instances(project: Path) -> dict[str, str]:
    current: dict[str, str] = {}
    for e in ledger_events(project, "dev"):
        if e["event"] == "launch":
            current[e["slot"]] = e["instance_id"]
        elif e["event"] in ("terminate", "stop"):
            current.pop(e["slot"], None)
    return current


def pool_nodes(project: Path) -> dict:
    return json.loads((project / ".gpufleet" / "dev" / "pool.json").read_text())["nodes"]


@pytest.mark.slow
def test_grow_then_shrink_by_whole_blocks(tmp_path, monkeypatch):
    project = project_with(tmp_path, 32)  # 4 nodes, 2 blocks
    first = rollout(project, "dev")
    assert first.exit_code == 0, first.output
    before = journal_state(project, "dev")
    assert before.finished and len(before.nodes) == 4
    placed = {s: (n.batch, n.instance_id) for s, n in before.nodes.items()}
    ids = instances(project)

    # grow to 8 nodes: blocks 2 and 3 appended as new batches; a dry run shows the launches first
    (project / "stacks" / "Pulumi.dev.yaml").write_text(stack(64))
    dry = rollout(project, "dev", "--dry-run")
    assert dry.exit_code == 0, dry.output
    launches = [line for line in dry.output.splitlines() if line.strip().startswith("launch")]
    assert launches and "4 instance: dev-b0002-n[00004-00005],dev-b0003-n[00006-00007]" in launches[0]
    assert "grow 4 -> 8 nodes" in dry.output
    assert "resize" not in {json.loads(x)["type"] for x in
                            (project / ".gpufleet" / "dev" / "journal.jsonl").read_text().splitlines()}
    grown = rollout(project, "dev")
    assert grown.exit_code == 0, grown.output
    st = journal_state(project, "dev")
    assert st.finished and len(st.nodes) == 8
    assert all(n.stage.value == "admitted" for n in st.nodes.values())
    for slot, (batch, instance) in placed.items():  # nothing existing moved or was relaunched
        assert (st.nodes[slot].batch, st.nodes[slot].instance_id) == (batch, instance)
    assert {s: i for s, i in instances(project).items() if s in ids} == ids
    last = max(b for b, _ in placed.values())
    new = sorted(s for s in st.nodes if s not in placed)
    assert new == ["dev-b0002-n00004", "dev-b0002-n00005", "dev-b0003-n00006", "dev-b0003-n00007"]
    assert all(st.nodes[s].batch > last for s in new)
    assert all(st.nodes[s].record is not None for s in new)  # gated: an admission record each
    events = [json.loads(line) for line in (project / ".gpufleet" / "dev" / "journal.jsonl").read_text().splitlines()]
    resize = [e for e in events if e["type"] == "resize"]
    assert len(resize) == 1 and resize[0]["kind"] == "grow" and resize[0]["added"] == new
    assert sorted(pool_nodes(project)) == sorted(st.nodes)
    # the canary did not run again: one smoke verdict, before the resize
    assert sum(1 for e in events if e["type"] == "acceptance" and e["stage"] == "smoke" and e["to"] == "started") <= 1
    again = rollout(project, "dev")  # the same target again: nothing changes
    assert again.exit_code == 0, again.output
    assert journal_state(project, "dev").events == st.events  # nothing journaled: no second resize

    # shrink back to 4 nodes while block 3 runs a job: the idle blocks go (2, then 1), never block 3
    doc = json.loads((project / ".gpufleet" / "dev" / "pool.json").read_text())
    doc["nodes"]["dev-b0003-n00006"]["busy"] = True
    (project / ".gpufleet" / "dev" / "pool.json").write_text(json.dumps(doc))
    (project / "stacks" / "Pulumi.dev.yaml").write_text(stack(32))
    original = SimProvisioner.terminate

    def crash(self, slots):
        raise Crash()
    monkeypatch.setattr(SimProvisioner, "terminate", crash)
    with pytest.raises(Crash):
        rollout(project, "dev")
    mid = journal_state(project, "dev")
    assert mid.resize is not None and set(mid.releasing.values()) == {"released"}
    assert sorted(mid.releasing) == ["dev-b0001-n00002", "dev-b0001-n00003", "dev-b0002-n00004",
                                     "dev-b0002-n00005"]
    monkeypatch.setattr(SimProvisioner, "terminate", original)
    done = rollout(project, "dev", "--force-unlock")
    assert done.exit_code == 0, done.output
    end = journal_state(project, "dev")
    assert end.resize is None and not end.releasing
    assert sorted(end.nodes) == ["dev-b0000-n00000", "dev-b0000-n00001", "dev-b0003-n00006", "dev-b0003-n00007"]
    assert sorted(instances(project)) == sorted(end.nodes)
    assert sorted(pool_nodes(project)) == sorted(end.nodes)
    steps = [e["step"] for e in [json.loads(x) for x in
                                 (project / ".gpufleet" / "dev" / "journal.jsonl").read_text().splitlines()]
             if e["type"] == "release"]
    assert steps == ["drained", "released", "terminated"]  # each once: the resume did not drain again
    report = json.loads((project / "reports" / "dev" / "rollout.json").read_text())
    assert report["status"] == "complete" and report["target_nodes"] == 4 and report["admitted_nodes"] == 4
    assert [(r["kind"], r["from_nodes"], r["to_nodes"], r["status"]) for r in report["resizes"]] == [
        ("grow", 4, 8, "finished"), ("shrink", 8, 4, "finished")]
    assert report["resizes"][1]["released_blocks"] == [1, 2]
    assert [p["units_available"] for p in report["partitions"]] == [1]


@pytest.mark.slow
def test_grow_keeps_the_seeded_faults_of_existing_slots(tmp_path):
    """A simulated stack with seeded faults grows too: the placement stays the one the cloud was
    seeded with (a changed seed or fault mix is still refused), the new slots come healthy."""
    faulty = lambda gpus: stack(gpus).replace("spareFraction: 0\n", "spareFraction: 0.5\n").replace(  # noqa: E731
        "    seed: 1\n", "    seed: 1\n    faults:\n      xid-79: 1\n")
    project = project_with(tmp_path, 32)
    (project / "stacks" / "Pulumi.dev.yaml").write_text(faulty(32))
    first = rollout(project, "dev")
    assert first.exit_code == 0, first.output
    seeded = json.loads((project / ".gpufleet" / "dev" / "sim" / "faults.json").read_text())["faults"]
    assert len(seeded) == 1
    (project / "stacks" / "Pulumi.dev.yaml").write_text(faulty(64))
    grown = rollout(project, "dev")
    assert grown.exit_code == 0, grown.output
    assert json.loads((project / ".gpufleet" / "dev" / "sim" / "faults.json").read_text())["faults"] == seeded
    st = journal_state(project, "dev")
    assert len(st.nodes) == 8 and all(n.stage.value == "admitted" for n in st.nodes.values())
    (project / "stacks" / "Pulumi.dev.yaml").write_text(faulty(64).replace("    seed: 1\n", "    seed: 2\n"))
    reseeded = rollout(project, "dev")
    assert reseeded.exit_code == 2 and "seed, fault mix or plan changed" in reseeded.output
