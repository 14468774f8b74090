"""The real-stack acceptance collector's own decisions, without hosts: what each host is told to
run, how per-host results become one bundle (fio merged over every client, a test missing on one
client left out), and what it refuses (hosts not up, pairs sharing a node). The playbook itself
runs for real in test_acceptance_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ProvisioningError
from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import read_bundle
from gpufleet.rollout.acceptance_collect import NetworkTools, PlaybookAcceptanceCollector, network_commands, retried
from gpufleet.ports import HostOutcome, HostStatus, Instance, StageResult
from gpufleet.rollout.wiring import acceptance_collector
from gpufleet.spec import AcceptanceConfig
from gpufleet.sim import acceptance as S  # the simulator's fio documents, in fio 3.33's shape
from tests.rollout.helpers import small_spec

HOSTS = {n: Instance(n, f"i-{i}", 1, 0, f"10.0.0.{i + 10}") for i, n in enumerate(("a", "b", "c", "d"))}
CFG = AcceptanceConfig(storage_clients=2, checkpoint_shards=8)


class FakeRunner:
    """Answers run_playbook as acceptance.yml would: one results JSON per host that finished."""

    def __init__(self, fail: str | None = None, skip: tuple[str, str] | None = None) -> None:
        self.fail, self.skip = fail, skip
        self.calls: list[dict] = []

    def run_playbook(self, stage, instances, playbook, extravars):
        self.calls.append({"stage": stage, "hosts": [i.slot for i in instances], "playbook": playbook, **extravars})
        out = Path(extravars["gpufleet_acceptance_out"])
        hosts = {}
        for inst in instances:
            if inst.slot == self.fail:
                hosts[inst.slot] = HostOutcome(inst.slot, HostStatus.UNREACHABLE, None, "timed out")
                continue
            me = extravars["gpufleet_acceptance_plan"][inst.slot]
            runs = {}
            if "fio" in me:
                for name, cmd in me["fio"].items():
                    if (inst.slot, name) != self.skip:
                        runs[name] = {"command": cmd, "exit_code": 0, "started": "2026-12-01T03:00:00.000001",
                                      "ended": "2026-12-01T03:00:05.5",
                                      "output": "fio: a warning\n" + S.fio_output("j", 1, "write", 2**30, 2.0, 2**20)}
            for tool, cmd in me.get("client", {}).items():
                if cmd:
                    runs[tool] = {"command": cmd, "exit_code": 0, "started": None, "ended": None, "output": f"{tool}\n"}
            (out / f"{inst.slot}.json").write_text(json.dumps(runs))
            hosts[inst.slot] = HostOutcome(inst.slot, HostStatus.OK, None, "")
        return StageResult(hosts=hosts)


def collector(runner, up=HOSTS):
    return PlaybookAcceptanceCollector(runner, lambda: up, "/fsx/", CFG, 2**30, fio_size="1G")


def test_storage_merges_every_client_and_splits_the_checkpoint(tmp_path):
    runner = FakeRunner()
    bundle = read_bundle(collector(runner).collect("storage", ["a", "b"], [], tmp_path / "storage"))
    call = runner.calls[0]
    assert call["playbook"] == "acceptance.yml" and call["hosts"] == ["a", "b"]
    assert call["gpufleet_acceptance_plan"]["b"]["dir"] == "/fsx/gpufleet-acceptance/b"
    ckpt = call["gpufleet_acceptance_plan"]["a"]["fio"][A.FIO_CHECKPOINT]
    assert f"--size={2**30 // 2 // 4}" in ckpt and "--numjobs=4" in ckpt  # half the checkpoint, half the shards
    assert set(bundle.files) == set(A.STORAGE_FILES)
    assert len(json.loads(bundle.files[A.FIO_SEQ_WRITE])["jobs"]) == 2
    record = bundle.manifest.files[A.FIO_SEQ_WRITE]
    assert record.command.startswith("on 2 clients at once: fio --directory=/fsx/gpufleet-acceptance/a ")
    assert record.exit_code == 0 and (record.ended - record.started).total_seconds() == pytest.approx(5.499999)
    assert not list(tmp_path.glob(".storage-results-*"))  # the per-host results are not left behind


def test_a_test_missing_on_one_client_is_not_collected_rather_than_judged_on_fewer(tmp_path):
    bundle = read_bundle(collector(FakeRunner(skip=("b", A.FIO_RAND_READ))).collect(
        "storage", ["a", "b"], [], tmp_path / "s1"))
    assert A.FIO_RAND_READ not in bundle.files and A.FIO_SEQ_WRITE in bundle.files
    unreachable = read_bundle(collector(FakeRunner(fail="b")).collect("storage", ["a", "b"], [], tmp_path / "s2"))
    assert unreachable.files == {}


def test_network_gives_each_pair_a_server_and_a_client(tmp_path):
    runner = FakeRunner()
    bundle = read_bundle(collector(runner).collect("network", list(HOSTS), [("a", "b"), ("c", "d")], tmp_path / "n"))
    plan = runner.calls[0]["gpufleet_acceptance_plan"]
    assert set(plan["b"]) == {"server"} and set(plan["a"]) == {"client"}
    assert "iperf3 -c 10.0.0.11 -p 5201 -t 10 -P 8 -J" in plan["a"]["client"]["iperf3"]
    assert plan["b"]["server"]["pingpong"] == "fi_pingpong -p efa -e rdm -I 1000 -S all"
    assert set(bundle.files) == {f for p in (("a", "b"), ("c", "d")) for f in A.pair_files(*p).values()}
    with pytest.raises(ValueError, match="shares a node"):
        collector(FakeRunner()).collect("network", list(HOSTS), [("a", "b"), ("b", "c")], tmp_path / "n2")


def test_hosts_that_are_not_up_are_refused_before_anything_runs(tmp_path):
    runner = FakeRunner()
    with pytest.raises(ProvisioningError, match="2 are not up: c, d"):
        collector(runner, up={k: HOSTS[k] for k in ("a", "b")}).collect(
            "network", list(HOSTS), [("a", "b"), ("c", "d")], tmp_path / "n")
    assert runner.calls == []
    with pytest.raises(ValueError, match="not 'smoke'"):
        collector(runner).collect("smoke", ["a", "b"], [], tmp_path / "x")


def test_a_client_retries_until_its_server_listens_and_prints_the_last_try_only():
    line = retried(["fi_pingpong", "-p", "tcp", "10.0.0.1"], tries=3)
    assert line.startswith("for i in $(seq 3); do out=$(fi_pingpong -p tcp 10.0.0.1 2>&1)")
    server, client = network_commands("10.0.0.9", NetworkTools(provider="tcp", rma_bw=False))
    assert server["rma_bw"] == client["rma_bw"] == "" and "-p tcp" in client["pingpong"]


def test_a_real_stack_is_wired_with_the_playbook_collector():
    spec = small_spec()
    c = acceptance_collector(spec, FakeRunner(), lambda: HOSTS)
    assert isinstance(c, PlaybookAcceptanceCollector)
    assert c.directory == f"{spec.storage.mount_path.rstrip('/')}/gpufleet-acceptance"
    assert c.tools.provider == "efa" and c.checkpoint_bytes == int(spec.storage.checkpoint_tib * 2**40)


def test_iperf3_runs_unpaced_unless_a_stream_rate_is_set():
    _, unpaced = network_commands("10.0.0.9", NetworkTools())
    _, paced = network_commands("10.0.0.9", NetworkTools(iperf3_stream_rate="250M"))
    assert "-b" not in unpaced["iperf3"].split() and "-P 8 -J" in unpaced["iperf3"]
    assert "iperf3 -c 10.0.0.9 -p 5201 -t 10 -P 8 -b 250M -J" in paced["iperf3"]
