"""Every shipped stack, rolled out in the simulator as shipped, reaches its target (issue 23 item 4).

The stacks that buy real instances (dev, prod, inference) run with their own cluster, partitions,
rollout and acceptance settings; only what needs AWS changes: the pool is the simulated one, the
journal stays local (prod's S3 backend) and a `simulator:` key with no faults makes the stack
simulated. `local` runs exactly as shipped (its seeded faults and spares). The rollout must finish
with every node admitted and each acceptance stage passed, the smoke job included: the `dev` stack
used to halt after a one-node canary that the two-node smoke job cannot run on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gpufleet.plan import build_plan
from gpufleet.spec import load_stack_path

from tests.rollout.e2e import rollout

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _simulated(stack: str) -> dict:
    doc = yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    config = doc["config"]
    if "gpufleet:simulator" not in config:
        config["gpufleet:pool"] = {"type": "sim"}
        config.get("gpufleet:rollout", {}).pop("stateBackend", None)
        config["gpufleet:simulator"] = {}
    return doc


def _project(root: Path, stack: str) -> Path:
    root.mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("images", "playbooks"):
        (root / name).symlink_to(REPO / name)
    (root / "stacks").mkdir()
    (root / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(_simulated(stack), sort_keys=False))
    return root


@pytest.mark.parametrize("stack", ["dev", "prod", "inference", "local"])
def test_a_shipped_stack_rolls_out_to_its_target_in_the_simulator(tmp_path, stack):
    project = _project(tmp_path / "p", stack)
    result = rollout(project, stack)
    assert result.exit_code == 0, result.output
    report = json.loads((project / "reports" / stack / "rollout.json").read_text())
    assert report["status"] == "complete", report["halt_reason"]
    assert report["admitted_nodes"] == report["target_nodes"]
    assert report["admitted_gpus"] >= load_stack_path(project / "stacks" / f"Pulumi.{stack}.yaml").cluster.target_gpus
    assert {a["stage"]: a["status"] for a in report["acceptance"]} == {
        "storage": "passed", "network": "passed", "smoke": "passed"}


def test_the_dev_canary_holds_the_smoke_job_and_the_plan_says_so():
    spec = load_stack_path(REPO / "stacks" / "Pulumi.dev.yaml")
    plan = build_plan(spec)
    canary = plan.batches[0]
    assert canary.last_node - canary.first_node + 1 >= spec.acceptance.smoke_nodes
    assert "CANARY_SIZED_FOR_SMOKE" in {f.code for f in plan.findings}
