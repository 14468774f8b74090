"""`gpufleet audit` on a simulated fleet: the simulator answers as the nodes (seeded and injected skew,
a node that never answers), the real audit decides.

The stack (tests/fixtures/drift/Pulumi.audit20.yaml): 20 nodes in 4 blocks of 5, partition
`train` on blocks 0-1, `eval` on blocks 2-3; the seed puts version skew (NCCL one minor behind) on
audit20-b0000-n00000 and an unreachable host on audit20-b0002-n00014.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.plan import build_plan
from gpufleet.reports.audit import RowStatus
from gpufleet.reports.audit_run import collect_audit
from gpufleet.reports.sim_sources import sim_sources
from gpufleet.sim import drift as sd
from gpufleet.spec import load_stack_path
from tests.sim.conftest import make_project, open_cloud

STACK = "audit20"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "drift" / f"Pulumi.{STACK}.yaml"
SKEWED, DOWN = "audit20-b0000-n00000", "audit20-b0002-n00014"
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


@pytest.fixture
def fleet(tmp_path):
    """A project with the stack, its simulated cloud and every slot launched (as after provisioning)."""
    project = make_project(tmp_path / "proj")
    shutil.copy(FIXTURE, project.stacks_dir / FIXTURE.name)
    spec = load_stack_path(project.stack_file(STACK))
    plan = build_plan(spec)
    cloud = open_cloud(spec, project, STACK)
    result = cloud.provisioner.provision(len(plan.batches), plan.nodes)
    assert len(result.instances) == 20 and not result.shortfall
    return project, spec, plan, cloud


def _audit(project, spec, plan):
    return collect_audit(spec, plan, project, STACK, sim_sources(spec, plan, project, STACK), NOW)


def _cli(project, *args):
    return CliRunner().invoke(main, ["--project", str(project.root), *args])


def test_the_seeded_fleet_gives_a_mismatch_row_a_mixed_partition_and_block_and_a_node_without_facts(fleet):
    project, spec, plan, _ = fleet
    report, hosts = _audit(project, spec, plan)
    assert len(report.nodes) == 20 and report.status.value == "drift"
    [node] = report.mismatched
    assert node.slot == SKEWED and node.partition == "train" and node.block == 0
    assert [(r.component, r.expected, r.installed, r.status) for r in node.mismatches] == [
        ("nccl", "2.27.5", "2.26.5", RowStatus.MISMATCH)]
    [down] = report.uncollected
    assert down.slot == DOWN and down.block == 2 and down.partition == "eval" and not down.rows
    assert "unreachable" in down.error and "Connection timed out" in down.error
    # the worst finding: NCCL is mixed in the skewed node's partition and block, nowhere else
    assert [(m.scope, m.name, m.component, {v: len(s) for v, s in m.versions.items()}) for m in report.mixed] == [
        ("partition", "train", "nccl", {"2.26.5": 1, "2.27.5": 9}), ("block", "0", "nccl", {"2.26.5": 1, "2.27.5": 4})]
    nccl = next(c for c in report.components if c.component == "nccl")
    assert nccl.versions == {"2.26.5": 1, "2.27.5": 18} and nccl.uncollected == 1
    # every collected node has one row per component the BOM pins (both agents on a simulated pool)
    assert {len(n.rows) for n in report.nodes if n.collected} == {15}
    assert hosts[DOWN].status == "unreachable" and hosts[SKEWED].status == "ok"


def test_injected_skew_in_another_partition_is_found_with_its_block(fleet):
    project, spec, plan, _ = fleet
    sd.inject(project, STACK, plan, ["audit20-b0003-n00016"], skew={"dcgm": "4.1.1"})
    report, _ = _audit(project, spec, plan)
    mixed = {(m.scope, m.name, m.component) for m in report.mixed}
    assert mixed == {("partition", "train", "nccl"), ("block", "0", "nccl"),
                     ("partition", "eval", "dcgm"), ("block", "3", "dcgm")}
    node = next(n for n in report.nodes if n.slot == "audit20-b0003-n00016")
    assert [(r.component, r.expected, r.installed) for r in node.mismatches] == [("dcgm", "4.2.3", "4.1.1")]
    # a missing component is a row of its own, never skipped
    inj = sd.Injections.load(sd.drift_file(project, STACK))
    inj.skew["audit20-b0003-n00017"] = {"lustre_client": None}  # type: ignore[dict-item]
    inj.save(sd.drift_file(project, STACK))
    report, _ = _audit(project, spec, plan)
    node = next(n for n in report.nodes if n.slot == "audit20-b0003-n00017")
    assert [(r.component, r.installed, r.status) for r in node.mismatches] == [("lustre_client", None, RowStatus.MISSING)]


def test_cli_exit_codes_clean_then_skewed_then_hidden(fleet):
    project, _, _, cloud = fleet
    # replace the two seeded faulty nodes (their replacements are healthy): a clean fleet
    for slot in (SKEWED, DOWN):
        cloud.provisioner.replace(cloud.slots[slot], "terminate")
    clean = _cli(project, "audit", "-s", STACK)
    assert clean.exit_code == 0, clean.output
    assert "nccl" in clean.output and "2.27.5: 20" in clean.output
    written = json.loads((project.reports_dir(STACK) / "audit.json").read_text())
    assert written["schema_version"] == 1 and written["status"] == "ok" and len(written["nodes"]) == 20
    for suffix in (".md", "-junit.xml", ".html"):
        assert (project.reports_dir(STACK) / f"audit{suffix}").is_file()

    bad = _cli(project, "sim", "inject", "-s", STACK, "--skew", "nccl=2.27.3", "--slot", "audit20-b0001-n00007")
    assert bad.exit_code == 0, bad.output
    skewed = _cli(project, "audit", "-s", STACK)
    assert skewed.exit_code == 4, skewed.output
    assert "audit20-b0001-n00007" in skewed.output and "nccl: expected 2.27.5, found 2.27.3" in skewed.output
    assert "MIXED block 1 nccl" in skewed.output

    hidden = _cli(project, "sim", "inject", "-s", STACK, "--no-facts", "--slot", "audit20-b0002-n00010")
    assert hidden.exit_code == 0
    as_json = _cli(project, "audit", "-s", STACK, "--json", "--out", str(project.root / "out"))
    assert as_json.exit_code == 4
    doc = json.loads(as_json.stdout)
    assert doc["status"] == "drift"
    assert [n["slot"] for n in doc["nodes"] if not n["collected"]] == ["audit20-b0002-n00010"]
    assert (project.root / "out" / "audit.json").is_file()

    assert _cli(project, "sim", "inject", "-s", STACK, "--clear").exit_code == 0
    assert _cli(project, "audit", "-s", STACK).exit_code == 0


def test_inject_refuses_bad_arguments_before_writing_anything(fleet):
    project = fleet[0]
    unknown_slot = _cli(project, "sim", "inject", "-s", STACK, "--skew", "nccl=2.27.3", "--slot", "nope")
    assert unknown_slot.exit_code == 2 and "--slot" in unknown_slot.output
    unknown_component = _cli(project, "sim", "inject", "-s", STACK, "--skew", "ncl=2.27.3", "--slot", SKEWED)
    assert unknown_component.exit_code == 2 and "--skew" in unknown_component.output
    malformed = _cli(project, "sim", "inject", "-s", STACK, "--skew", "nccl", "--slot", SKEWED)
    assert malformed.exit_code == 2 and "COMPONENT=VERSION" in malformed.output
    real = _cli(project, "sim", "inject", "-s", "dev", "--orphans", "1")
    assert real.exit_code == 2 and "not a simulated stack" in real.output
    assert not sd.drift_file(project, STACK).exists()
