"""`gpufleet pool`: the summary (pure), adapter selection, and the commands on a sim and a local Slurm stack."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.errors import PoolError
from gpufleet.plan import build_plan
from gpufleet.pool.command import free_units, summarize
from gpufleet.pool.factory import pool_for
from gpufleet.pool.protocol import NodeState, PendingNode, PoolNode, PoolState
from gpufleet.pool.sim import SimPool
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.project import load_project
from gpufleet.spec import load_stack

from .conftest import ensure_slurm
from .contract import record
from .fakes import RecordingLauncher

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path):
    """A copy of the repository's project files (stacks, images) in a temporary folder."""
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", root / "stacks")
    shutil.copytree(REPO / "images", root / "images")
    return load_project(root)


def test_free_units_need_every_node_of_the_unit_admitted_and_idle():
    spec = load_stack("local")
    plan = build_plan(spec)  # 10-GPU units: unit 0 on nodes 0-1, unit 1 on nodes 1-2, ...
    names = [n.name for n in plan.nodes]
    nodes = {names[i]: PoolNode(slot=names[i], state=NodeState.ADMITTED, block=0, partition="train") for i in range(3)}
    assert free_units(plan, PoolState(nodes=nodes))["train"] == 2
    nodes[names[1]] = PoolNode(slot=names[1], state=NodeState.ADMITTED, block=0, partition="train", busy=True)
    assert free_units(plan, PoolState(nodes=nodes))["train"] == 0  # node 1 carries both units
    nodes[names[1]] = PoolNode(slot=names[1], state=NodeState.QUARANTINED, block=0, partition="train",
                               reason_code="xid-79", reason="fell off the bus", failures=1)
    doc = summarize(plan, PoolState(nodes=nodes), "local", "sim")
    assert doc["counts"] == {"pending": 0, "admitted": 2, "quarantined": 1, "blacklisted": 0}
    assert doc["partitions"]["train"] == {"units": 80, "free_units": 0, "nodes": {"admitted": 2, "quarantined": 1}}
    assert doc["partitions"]["sim"] == {"units": 16, "free_units": 0, "nodes": {}}
    assert doc["quarantined"] == [{"slot": names[1], "block": 0, "partition": "train", "reason_code": "xid-79",
                                   "reason": "fell off the bus", "failures": 1}]


def test_factory_picks_the_adapter_by_stack(project):
    sim = pool_for(load_stack("local", project.stacks_dir), project, "local", launcher=RecordingLauncher())
    assert isinstance(sim, SimPool) and sim.path == project.state_dir("local") / "pool.json"
    with pytest.raises(PoolError, match="local-slurm.*not running.*gpufleet pool up -s local-slurm"):
        pool_for(load_stack("local-slurm", project.stacks_dir), project, "local-slurm")
    dev = load_stack("dev", project.stacks_dir)
    assert dev.pool.type == "slurm" and not dev.simulated
    real = pool_for(dev, project, "dev")
    assert isinstance(real, SlurmPool) and real.cli.conf is None  # the system's SLURM_CONF
    assert real.version == (24, 11)  # the BOM's pin picks the JSON reader and the block topology


def test_pool_command_on_the_sim_stack(project):
    runner = CliRunner()
    spec = load_stack("local", project.stacks_dir)
    plan = build_plan(spec)
    pool = pool_for(spec, project, "local", plan=plan)
    first = [PendingNode(slot=plan.nodes[i].name, block=0, partition="train") for i in range(5)]
    pool.register_pending(first)
    for n in first:
        pool.admit(n.slot, record(n))
    pool.quarantine(first[4].slot, "xid-79", "fell off the bus")
    args = ["--project", str(project.root), "pool", "-s", "local"]
    out = runner.invoke(main, [*args, "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["counts"]["admitted"] == 4 and doc["partitions"]["train"]["free_units"] == 3  # units 0-2 on nodes 0-3
    text = runner.invoke(main, args).output
    assert "quarantined" in text and first[4].slot in text and "xid-79: fell off the bus" in text
    out = runner.invoke(main, [*args[:3], "blacklist", "-s", "local", first[0].slot, "--reason", "PDU fault"])
    assert out.exit_code == 0 and "blacklisted (PDU fault)" in out.output
    out = runner.invoke(main, [*args[:3], "clear", "-s", "local", first[0].slot, "--reason", "PDU fixed"])
    assert out.exit_code == 0 and "pending, failures 0" in out.output
    out = runner.invoke(main, [*args[:3], "clear", "-s", "local", "local-b9999-n99999", "--reason", "x"])
    assert out.exit_code == 1 and "local-b9999-n99999" in out.output
    out = runner.invoke(main, [*args[:3], "up", "-s", "local"])
    assert out.exit_code == 2 and "no local Slurm" in out.output


@pytest.mark.slow  # a real local Slurm, ~8 s
def test_pool_up_down_on_local_slurm(project):
    ensure_slurm()
    runner = CliRunner()
    args = ["--project", str(project.root), "pool"]
    try:
        out = runner.invoke(main, [*args, "up", "-s", "local-slurm"])
        assert out.exit_code == 0, out.output
        assert "125 slurmd up" in out.output and str(project.state_dir("local-slurm")) in out.output
        doc = json.loads(runner.invoke(main, [*args, "-s", "local-slurm", "--json"]).output)
        assert doc["pool"] == "slurm" and doc["counts"]["pending"] == 125
        again = runner.invoke(main, [*args, "up", "-s", "local-slurm"])  # keeps the running cluster
        assert again.exit_code == 0 and "already up with 125 nodes" in again.output
    finally:
        out = runner.invoke(main, [*args, "down", "-s", "local-slurm"])
    assert out.exit_code == 0 and "stopped 128 daemon(s)" in out.output  # 125 slurmd, slurmctld, slurmdbd, mariadbd


def test_pool_up_says_how_to_install_slurm(project, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    out = CliRunner().invoke(main, ["--project", str(project.root), "pool", "up", "-s", "local-slurm"])
    assert out.exit_code == 1 and "apt-get install slurm-wlm" in out.output, out.output
