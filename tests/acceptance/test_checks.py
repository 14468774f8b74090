"""The acceptance checks: floors from the plan and the catalog, reason codes, missing evidence."""

from __future__ import annotations

import json

import pytest

from gpufleet.gates import acceptance as A
from gpufleet.gates.verdict import Verdict
from gpufleet.plan.storage import MB, TIB
from gpufleet.spec import AcceptanceConfig
from tests.acceptance.helpers import P5, bundle, fio_doc, real, storage

CFG = AcceptanceConfig(storage_clients=4)


def _storage_files(seq_mbs: float, ckpt_bytes: int, ckpt_ms: int, md_ops: float = 5000, iops: float = 50_000,
                   p99_ns: float = 2e6, error: int = 0) -> dict[str, str]:
    per_client = seq_mbs * MB / 4
    seq = lambda d: fio_doc([{"name": f"c{i}", "error": error, d: {"bw_bytes": per_client, "io_bytes": 1, "runtime": 1000}}
                             for i in range(4)])
    md = fio_doc([{"read": {"iops": md_ops}}])
    return {A.FIO_SEQ_WRITE: seq("write"), A.FIO_SEQ_READ: seq("read"),
            A.FIO_RAND_READ: fio_doc([{"read": {"iops": iops, "p99": p99_ns}}]),
            A.FIO_MD_CREATE: md, A.FIO_MD_STAT: md, A.FIO_MD_DELETE: md,
            A.FIO_CHECKPOINT: fio_doc([{"write": {"io_bytes": ckpt_bytes // 8, "runtime": ckpt_ms}}] * 8)}


def test_storage_floor_is_the_plans_throughput_for_the_clients():
    cfg, plan = storage(dataset_tib=100, checkpoint_tib=1, throughput_per_tib=250)
    assert plan.aggregate_throughput_mbs == int(plan.capacity_gib / 1024 * 250)
    # four p5 clients over one 100 Gbit/s ENA card each: 50,000 MB/s, more than the file system's
    assert A.expected_storage_mbs(plan, P5, 4) == plan.aggregate_throughput_mbs
    assert A.expected_storage_mbs(plan, P5, 1) == min(plan.aggregate_throughput_mbs, 12_500)


def test_storage_passes_at_the_modelled_throughput_and_halts_below_the_share():
    cfg, plan = storage(dataset_tib=100, checkpoint_tib=0.01, throughput_per_tib=250)
    modelled = A.expected_storage_mbs(plan, P5, 4)
    ckpt = int(0.01 * TIB)
    ok = A.storage_checks(bundle(_storage_files(modelled, ckpt, 5_000)), cfg, plan, P5, CFG)
    assert all(c.verdict is Verdict.PASS for c in ok), [c for c in ok if c.verdict is not Verdict.PASS]
    slow = A.storage_checks(bundle(_storage_files(modelled * 0.79, ckpt, 5_000)), cfg, plan, P5, CFG)
    codes = {c.check_id: c.reason_code for c in slow if c.verdict is Verdict.QUARANTINE}
    assert codes == {"storage.seq-write": "storage-write-slow", "storage.seq-read": "storage-read-slow"}
    outcome = A.stage_outcome("storage", slow)
    assert not outcome.passed and outcome.reason_codes == ("storage-write-slow", "storage-read-slow")


def test_checkpoint_rehearsal_against_the_target_and_the_plans_size():
    cfg, plan = storage(checkpoint_tib=0.01, target_checkpoint_write_seconds=60)
    ckpt = int(0.01 * TIB)
    by_id = lambda checks: {c.check_id: c for c in checks}
    late = by_id(A.storage_checks(bundle(_storage_files(1e6, ckpt, 61_000)), cfg, plan, P5, CFG))["storage.checkpoint"]
    assert late.reason_code == "checkpoint-slow" and "61.0 s" in late.measured
    short = by_id(A.storage_checks(bundle(_storage_files(1e6, ckpt // 2, 1_000)), cfg, plan, P5, CFG))
    assert short["storage.checkpoint"].reason_code == "checkpoint-rehearsal-short"


def test_random_read_metadata_and_failed_fio_jobs():
    cfg, plan = storage(checkpoint_tib=0.01)
    ckpt = int(0.01 * TIB)
    checks = {c.check_id: c for c in A.storage_checks(
        bundle(_storage_files(1e6, ckpt, 1_000, md_ops=100, iops=200, p99_ns=9e7)), cfg, plan, P5, CFG)}
    assert checks["storage.random-read"].reason_code == "storage-randread-slow"
    assert checks["storage.metadata"].reason_code == "storage-metadata-slow"
    assert "create 100/s" in checks["storage.metadata"].message
    laggy = {c.check_id: c for c in A.storage_checks(
        bundle(_storage_files(1e6, ckpt, 1_000, p99_ns=9e7)), cfg, plan, P5, CFG)}
    assert laggy["storage.random-read"].reason_code == "storage-randread-latency"
    broken = {c.check_id: c for c in A.storage_checks(
        bundle(_storage_files(1e6, ckpt, 1_000, error=5)), cfg, plan, P5, CFG)}
    assert broken["storage.seq-write"].reason_code == "fio-failed" and "error 5" in broken["storage.seq-write"].measured


def test_missing_storage_files_are_not_collected_never_a_pass():
    cfg, plan = storage()
    checks = A.storage_checks(bundle({}), cfg, plan, P5, CFG)
    assert {c.reason_code for c in checks} == {"missing-fio-seq-write", "missing-fio-seq-read", "missing-fio-rand-read",
                                               "missing-fio-md-create", "missing-fio-checkpoint"}
    assert all(c.verdict is Verdict.REMEDIATE for c in checks)


def _iperf(gbps: float, retransmits: int = 0) -> str:
    doc = json.loads(real("iperf3_J_tcp_loopback__iperf3.12__captured.json"))
    doc["end"]["sum_received"]["bits_per_second"] = gbps * 1e9
    doc["end"]["sum_sent"]["retransmits"] = retransmits
    return json.dumps(doc)


def _ping(avg: float, loss: float = 0) -> str:
    return (f"--- b ping statistics ---\n20 packets transmitted, {int(20 * (1 - loss / 100))} received, "
            f"{loss:g}% packet loss, time 1900ms\nrtt min/avg/max/mdev = {avg / 2}/{avg}/{avg * 2}/0.01 ms\n")


def _pingpong(usec: float) -> str:
    return ("bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n"
            f"64      1k      =1k      125k        0.02s      6.40    {usec:.2f}       0.10\n")


def _rma(mbs: float) -> str:
    return ("name     bytes   iters   total   time     MB/sec    usec/xfer   Mxfers/sec\n"
            f"write_1m 1m      1k      1000m   0.10s  {mbs:.2f}     80.00       0.01\n")


def _net(a: str, b: str, gbps=80.0, rtt=0.1, loss=0.0, usec=15.0, mbs=11_000.0, retr=0) -> dict[str, str]:
    f = A.pair_files(a, b)
    return {f["iperf3"]: _iperf(gbps, retr), f["ping"]: _ping(rtt, loss), f["pingpong"]: _pingpong(usec),
            f["rma_bw"]: _rma(mbs)}


def test_network_floors_follow_the_instance_type():
    assert A.tcp_floor_gbps(P5, CFG) == 50.0  # half of one 100 Gbit/s card
    assert A.efa_floor_mbs(P5, CFG) == pytest.approx(8750.0)  # 0.7 x 12,500 MB/s


@pytest.mark.parametrize("fault,code,verdict", [
    ({"gbps": 10}, "mgmt-tcp-slow", Verdict.QUARANTINE),
    ({"retr": 5000}, "mgmt-tcp-retransmits", Verdict.WARN),
    ({"rtt": 2.0}, "mgmt-latency-high", Verdict.QUARANTINE),
    ({"loss": 5}, "mgmt-packet-loss", Verdict.QUARANTINE),
    ({"usec": 80}, "efa-latency-high", Verdict.QUARANTINE),
    ({"mbs": 2000}, "efa-bw-low", Verdict.QUARANTINE),
])
def test_network_faults_are_named_on_their_pair(fault, code, verdict):
    files = {**_net("n0", "n1"), **_net("n2", "n3", **fault)}
    checks = A.network_checks(bundle(files), [("n0", "n1"), ("n2", "n3")], P5, CFG)
    bad = [c for c in checks if c.verdict is not Verdict.PASS]
    assert [(c.reason_code, c.verdict) for c in bad] == [(code, verdict)] and "[n2--n3]" in bad[0].check_id
    assert A.stage_outcome("network", checks).passed is (verdict is Verdict.WARN)


def test_network_tool_failures():
    f = A.pair_files("n0", "n1")
    files = {f["iperf3"]: real("iperf3_J_connection_refused__iperf3.12__captured.json"),
             f["ping"]: "ping: connect: Network is unreachable\n",
             f["pingpong"]: "fi_getinfo(): -61 (No data available)\n"}
    checks = {c.check_id.split("[")[0]: c for c in A.network_checks(bundle(files), [("n0", "n1")], P5, CFG)}
    assert checks["net.tcp"].reason_code == "mgmt-link-down" and "Connection refused" in checks["net.tcp"].measured
    assert checks["net.rtt"].reason_code == "mgmt-link-down"
    assert checks["net.efa-latency"].reason_code == "efa-test-failed"
    assert checks["net.efa-bw"].reason_code == "missing-fi_rma_bw-n0--n1"
    assert len(A.network_checks(bundle(files), [("n0", "n1")], P5, CFG, efa=False)) == 2


def _smoke(**over: object) -> str:
    doc = {"gpufleet_smoke": 1, "world_size": 16, "backend": "nccl", "steps": 3, "loss": [4.0, 2.0, 1.0],
           "samples_per_second": 90_000.0, "allreduce_ms": [1.0, 3.0, 2.0], "data_loading_share": 0.1,
           "ranks_agree": True, "checksums": [1.5] * 16, "hosts": [f"n{i // 8}" for i in range(16)]}
    doc.update(over)
    return "0: " + json.dumps(doc) + "\n"


def test_smoke_passes_and_becomes_the_training_baseline():
    b = bundle({A.TRAIN_SMOKE: _smoke()})
    checks = A.smoke_checks(b, P5, CFG)
    assert all(c.verdict is Verdict.PASS for c in checks) and len(checks) == 4
    base = A.training_baseline(b)
    assert base["first_loss"] == 4.0 and base["last_loss"] == 1.0 and base["allreduce_ms_median"] == 2.0


@pytest.mark.parametrize("over,code", [
    ({"loss": [4.0, 3.9, 3.0]}, "smoke-loss-flat"),
    ({"loss": [4.0, float("nan")]}, "smoke-loss-invalid"),
    ({"ranks_agree": False, "checksums": [1.5] * 9 + [1.7] + [1.5] * 6}, "smoke-ranks-diverged"),
    ({"samples_per_second": 100.0}, "smoke-throughput-low"),
])
def test_smoke_failures(over, code):
    text = _smoke(**over)
    checks = A.smoke_checks(bundle({A.TRAIN_SMOKE: text}), P5, CFG)
    bad = [c for c in checks if c.verdict.blocks_admission]
    assert [c.reason_code for c in bad] == [code]
    if code == "smoke-ranks-diverged":
        assert "rank(s) 9 on n1" in bad[0].message


def test_smoke_floor_per_gpu_and_configured():
    assert A.smoke_floor(P5, 16, CFG) == 16 * A.SMOKE_SAMPLES_PER_SECOND_PER_GPU["H100"]
    assert A.smoke_floor(P5, 16, AcceptanceConfig(smoke_min_samples_per_second=5)) == 5
    checks = A.smoke_checks(bundle({A.TRAIN_SMOKE: _smoke()}), None, CFG)
    assert checks[-1].reason_code == "smoke-no-floor" and checks[-1].verdict is Verdict.WARN


def test_smoke_job_that_printed_nothing():
    checks = A.smoke_checks(bundle({A.TRAIN_SMOKE: "srun: error: n1: task 1: Exited with exit code 1\n"}), P5, CFG)
    assert [c.reason_code for c in checks] == ["smoke-failed"]
    assert A.smoke_checks(bundle({}), P5, CFG)[0].reason_code == "missing-train-smoke"


def test_smoke_launch_spec_is_an_srun_line_the_slurm_launcher_accepts():
    spec = A.smoke_launch_spec(["a", "b"], 8, "/venv/bin/python", "train_smoke.py", "/fsx/smoke", 30,
                               env={"MASTER_PORT": "29501"})
    assert spec.argv[:3] == ("env", "MASTER_PORT=29501", "srun") and spec.ranks == 16
    assert {"--nodelist=a,b", "--nodes=2", "--ntasks-per-node=8", "-l", "--data-dir=/fsx/smoke"} <= set(spec.argv)
    assert A.smoke_launch_spec(["a", "b"], 1, "py", "s.py", "/d", 5).argv[0] == "srun"
