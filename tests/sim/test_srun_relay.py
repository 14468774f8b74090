"""The gates' runs on local-slurm as real srun steps printing the simulator's output
(`gpufleet.sim.srun_relay`): the relay's task, its command line, and a rollout on a real local Slurm
whose gate runs and smoke job slurmctld placed and ran, a slow link still found by the gates."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool.protocol import LaunchResult
from gpufleet.sim.srun_relay import SrunRelayLauncher

T0 = datetime(2026, 7, 14, 8, 0, tzinfo=timezone.utc)
SPEC = LaunchSpec(kind="slurm", name="pair-a-b", nodes=("n-a", "n-b"), ranks=16, env={},
                  argv=("srun", "--mpi=pmix", "-N2", "--gpus-per-node=8", "all_reduce_perf", "-b", "8"))


def test_rank_zero_prints_the_file_byte_for_byte_and_every_task_exits_its_code(tmp_path: Path) -> None:
    out = tmp_path / "run.out"
    out.write_bytes(b"#  out-of-place\n\x1b odd bytes \xe2\x82\xac\n")
    env = {**os.environ, "SLURM_PROCID": "0"}
    done = subprocess.run([sys.executable, "-m", "gpufleet.sim.srun_relay", str(out), "3"], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 3 and done.stdout == out.read_bytes()
    done = subprocess.run([sys.executable, "-m", "gpufleet.sim.srun_relay", str(out), "0"],
                          env={**env, "SLURM_PROCID": "1"}, capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout == b""


class Recorder:
    """The Launcher port as the real SlurmLauncher is called: records the specs, answers with srun's output."""

    def __init__(self, answer: tuple[int, str]) -> None:
        self.specs: list[LaunchSpec] = []
        self.answer = answer

    def run(self, specs, timeout_s):
        self.specs += specs
        now = datetime.now(timezone.utc)
        return [LaunchResult(s.name, s.nodes, self.answer[0], self.answer[1], now, now, s.command_line) for s in specs]


class Sim:
    def run(self, specs, timeout_s):
        return [LaunchResult(s.name, s.nodes, 1, "simulated text\n", T0, T0 + timedelta(seconds=40)) for s in specs]


def test_the_relay_runs_each_spec_as_srun_on_its_nodes_and_keeps_srun_s_status_and_the_modelled_times(
        tmp_path: Path) -> None:
    real = Recorder((1, "simulated text\nsrun: error: n-a: task 0: Exited with exit code 1\n"))
    relay = SrunRelayLauncher(Sim(), tmp_path / "relay", python="/venv/python")
    with pytest.raises(RuntimeError, match="no Slurm launcher bound"):
        relay.run([SPEC], 60)
    relay.bind(real)
    got, = relay.run([SPEC], 60)
    argv = real.specs[0].argv
    assert argv[:5] == ("srun", "-w", "n-a,n-b", "-N2", "--ntasks-per-node=1")  # CPUs only: no --gpus
    assert "--job-name=gpufleet-pair-a-b" in argv and argv[-5:-2] == ("/venv/python", "-m", "gpufleet.sim.srun_relay")
    assert Path(argv[-2]).read_text() == "simulated text\n" and argv[-1] == "1"
    assert (got.exit_code, got.output) == real.answer  # what srun said, not what the simulator said
    assert (got.started, got.ended) == (T0, T0 + timedelta(seconds=40)) and got.command == SPEC.command_line
    assert relay.run([], 60) == []


@pytest.mark.slow  # real slurmctld and 8 slurmd (`gpufleet pool up`), a rollout
def test_on_local_slurm_the_gates_runs_are_real_srun_jobs_slurm_placed_on_their_nodes() -> None:
    from tests.daytwo.fleet import gpufleet
    from tests.daytwo.test_patrol_slurm import STACK, STACK_FILE, sh
    from tests.pool.conftest import ensure_slurm
    from tests.rollout.project import make_project

    ensure_slurm()
    short = Path(tempfile.mkdtemp(prefix="gfr", dir="/tmp"))  # slurmstepd's socket paths stay under 108 bytes
    root = make_project(short / "p")
    (root / "stacks" / f"Pulumi.{STACK}.yaml").write_text(STACK_FILE + "    badLinks: 1\n")  # a slow link
    try:
        assert (up := gpufleet(root, "pool", "up", "-s", STACK)).exit_code == 0, up.output
        conf = next((root / ".gpufleet" / STACK / "slurm").rglob("slurm.conf"))
        rolled = gpufleet(root, "rollout", "-s", STACK)
        assert rolled.exit_code == 0, rolled.output
        # the real gates judged what srun printed: the simulator's slow link is found between its two nodes
        assert re.search(r"link fault \S+ <-> \S+ \(escalate; both nodes admitted\)", rolled.output), rolled.output
        jobs = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in sh(conf, "scontrol", "-o", "show", "job").splitlines()]
        relayed = [j for j in jobs if j.get("JobName", "").startswith("gpufleet-")]
        assert relayed, jobs
        for j in relayed:  # Slurm placed each run on exactly the nodes the gate named, and it ran to the end
            placed = sh(conf, "scontrol", "show", "hostnames", j["NodeList"]).split()
            assert j["JobState"] == "COMPLETED" and j["ExitCode"] == "0:0", j
            asked = sh(conf, "scontrol", "show", "hostnames", j["ReqNodeList"]).split()  # srun -w
            assert placed == asked and len(placed) == int(j["NumNodes"]) >= 2, j
        folder = root / ".gpufleet" / STACK / "srun-relay"
        for j in relayed:  # each step printed the simulator's output for its run, kept for the gates
            assert (folder / f"{j['JobName'].removeprefix('gpufleet-')}.out").read_text().strip()
        smoke = [j for j in relayed if j["JobName"] == "gpufleet-acceptance-smoke"]
        assert len(smoke) == 1 and smoke[0]["NumNodes"] == "2", relayed  # acceptance.smokeNodes
        manifests = [p for p in (root / ".gpufleet" / STACK).rglob("manifest.json")
                     if '"srun-relay"' in p.read_text()]
        assert len(manifests) == 1, manifests  # the smoke stage's bundle is what srun printed
        printed = (manifests[0].parent / "train-smoke.txt").read_text()
        # the simulator's bytes, after whatever srun itself said (waiting for the resumed nodes, say)
        assert printed.endswith((folder / "acceptance-smoke.out").read_text()) and '"gpufleet_smoke"' in printed
        nodes = sh(conf, "sinfo", "-h", "-N", "-o", "%N %t").split("\n")
        assert not any("resv" in n or "maint" in n for n in nodes), nodes  # reservations gone
    finally:
        gpufleet(root, "pool", "down", "-s", STACK)
        shutil.rmtree(short, ignore_errors=True)


def test_each_srun_names_its_nodes_partition_and_a_run_over_two_partitions_keeps_the_simulators_result(
        tmp_path: Path) -> None:
    real = Recorder((0, "relayed\n"))
    relay = SrunRelayLauncher(Sim(), tmp_path / "relay", {"n-a": "train", "n-b": "train", "n-c": "sim"})
    relay.bind(real)
    across = SPEC.model_copy(update={"name": "pair-a-c", "nodes": ("n-a", "n-c")})
    inside, over = relay.run([SPEC, across], 60)
    assert [s.name for s in real.specs] == ["pair-a-b"] and "--partition=train" in real.specs[0].argv
    assert inside.output == "relayed\n"
    assert (over.exit_code, over.output) == (1, "simulated text\n")  # one Slurm job cannot span two partitions
    assert "partitions sim, train" in (tmp_path / "relay" / "pair-a-c.not-relayed").read_text()
