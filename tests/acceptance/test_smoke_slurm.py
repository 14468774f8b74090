"""The training smoke job for real: torch CPU with gloo, launched by the Slurm pool's launcher
over simulated nodes of a real local Slurm; the loss falls, the ranks agree, and a planted
gradient corruption on one rank is caught by the check."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet import catalog
from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import FileRecord, Manifest, read_bundle, write_bundle
from gpufleet.gates.verdict import Verdict
from gpufleet.plan import build_plan
from gpufleet.pool.slurm.adapter import SlurmLauncher
from gpufleet.pool.slurm.local import LocalSlurm
from gpufleet.rollout.acceptance import AcceptanceRunner, LauncherSmokeCollector
from gpufleet.spec import AcceptanceConfig
from tests.pool.conftest import ensure_slurm, small_spec

pytestmark = [pytest.mark.slow, pytest.mark.requires_root]
ROOT = Path(__file__).resolve().parents[2]


# The CPU build first (a machine of this kind keeps its wheel on pip's find-links); the registry's
# default torch is the multi-GB CUDA build, which a CPU-only smoke test does not need.
TORCH_REQUIREMENTS = (("torch==2.13.0+cpu",), ("torch",))


def ensure_torch() -> None:
    """torch in this interpreter: the CPU wheel when pip can find it, else the package index's."""
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    errors = []
    for requirement in TORCH_REQUIREMENTS:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *requirement], capture_output=True,
                              text=True, timeout=1800)
        if proc.returncode == 0:
            return
        errors.append(f"{' '.join(requirement)}: {proc.stderr.strip()[-300:]}")
    pytest.fail("torch is not installed and pip could not install it:\n" + "\n".join(errors))


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalSlurm, list[str]]]:
    ensure_torch()
    ensure_slurm()
    spec = small_spec()
    plan = build_plan(spec)
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    cluster.up(spec, plan)
    try:
        yield cluster, [n.name for n in plan.nodes]
    finally:
        cluster.down()


def free_port() -> str:
    """A port nothing listens on now (the local Slurm's daemons take random ones in 20000-60000)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run_smoke(slurm: LocalSlurm, nodes: list[str], shared: Path, *extra: str):
    spec = A.smoke_launch_spec(nodes, 1, sys.executable, str(ROOT / A.SMOKE_SCRIPT), str(shared), steps=25,
                               extra=extra, name=f"smoke-{len(nodes)}", env={"MASTER_PORT": free_port()})
    result, = SlurmLauncher(slurm.cli(timeout_s=30)).run([spec], timeout_s=420)
    folder = write_bundle(shared / "bundle", {A.TRAIN_SMOKE: result.output}, Manifest(
        slot="acceptance-smoke", collected_by="slurm", files={A.TRAIN_SMOKE: FileRecord(
            command=result.command, exit_code=result.exit_code, started=result.started, ended=result.ended)}))
    return result, read_bundle(folder)


CFG = AcceptanceConfig(smoke_min_samples_per_second=50, smoke_loss_factor=0.5)


def test_smoke_job_over_four_slurm_nodes_trains_and_agrees(slurm, tmp_path):
    """Through the rollout's runner: the launcher's output becomes the bundle, the record and the baseline."""
    cluster, names = slurm
    spec = small_spec().model_copy(update={"acceptance": AcceptanceConfig(
        smoke_nodes=4, smoke_min_samples_per_second=50, smoke_loss_factor=0.5)})
    collector = LauncherSmokeCollector(SlurmLauncher(cluster.cli(timeout_s=30)), sys.executable,
                                       str(ROOT / A.SMOKE_SCRIPT), str(tmp_path / "shared"), ranks_per_node=1,
                                       steps=25, timeout_s=420, env={"MASTER_PORT": free_port()})
    runner = AcceptanceRunner(spec, build_plan(spec), tmp_path / "state", collector,
                              catalog.get(spec.cluster.instance_type))
    outcome = runner.smoke(names[:4])
    assert outcome.passed, [c for c in outcome.checks if c.verdict is not Verdict.PASS]
    base = json.loads((tmp_path / "state" / "baselines" / "training.json").read_text())
    assert base["world_size"] == 4 and base["backend"] == "gloo" and sorted(base["hosts"]) == sorted(names[:4])
    assert base["last_loss"] <= 0.5 * base["first_loss"]
    assert list((tmp_path / "shared").glob("smoke-dataset-*.pt")), "the dataset was written to the shared folder"


def test_a_corrupted_gradient_on_one_rank_is_caught(slurm, tmp_path):
    cluster, names = slurm
    result, bundle = run_smoke(cluster, names[:2], tmp_path, "--corrupt-gradient-rank=1")
    assert result.exit_code == 0, result.output[-2000:]
    bad = [c for c in A.smoke_checks(bundle, None, CFG) if c.verdict.blocks_admission]
    assert [c.reason_code for c in bad] == ["smoke-ranks-diverged"]
    assert f"rank(s) 1 on {names[1]}" in bad[0].message
