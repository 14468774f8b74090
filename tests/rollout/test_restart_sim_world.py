"""`rollout --restart` on a simulated stack starts from a fresh simulated world (issue 23 item 6):
the seeded faults come back. It used to archive only the journal, so the second rollout met the
instances the first had already replaced and quarantined nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.rollout.e2e import rollout

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

# the dev stack as shipped, simulated, with one seeded fault and a spare to replace it
STACK = (REPO / "stacks" / "Pulumi.dev.yaml").read_text().replace("spareFraction: 0\n", "spareFraction: 0.5\n").replace(
    "    type: slurm\n", "    type: sim\n") + "  gpufleet:simulator:\n    faults:\n      xid-79: 1\n"


def _quarantined(project: Path) -> list[str]:
    report = json.loads((project / "reports" / "dev" / "rollout.json").read_text())
    assert report["status"] == "complete", report["halt_reason"]
    return sorted(q["slot"] for q in report["quarantined"])


def test_restart_brings_the_seeded_faults_back(tmp_path):
    project = tmp_path / "p"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", project / "Pulumi.yaml")
    for name in ("images", "playbooks"):
        (project / name).symlink_to(REPO / name)
    (project / "stacks" / "Pulumi.dev.yaml").write_text(STACK)
    first = rollout(project, "dev")
    assert first.exit_code == 0, first.output
    seeded = _quarantined(project)
    assert len(seeded) == 1
    again = rollout(project, "dev", "--restart")
    assert again.exit_code == 0, again.output
    assert "archived the simulated world" in again.output
    assert _quarantined(project) == seeded
    assert len(list((project / ".gpufleet" / "dev").glob("sim.*"))) == 1  # moved aside, not deleted
