"""The simulator's acceptance outputs: shaped like the real captures, judged by the real checks,
healthy by default and failing exactly where a seeded fault says."""

from __future__ import annotations

import json
import random
import re

import pytest

from gpufleet.gates import acceptance as A
from gpufleet.gates.verdict import Verdict
from gpufleet.sim import acceptance as S
from gpufleet.spec import AcceptanceConfig
from tests.acceptance.helpers import P5, bundle, real, storage

CFG = AcceptanceConfig()
NODES = [f"n{i}" for i in range(4)]
PAIRS = [("n0", "n1"), ("n2", "n3")]
ADDR = {n: f"10.0.0.{i + 10}" for i, n in enumerate(NODES)}


def _keys(doc: object, prefix: str = "") -> set[str]:
    """Every key path of a JSON document (list entries collapsed), for shape comparisons."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.add(prefix + k)
            out |= _keys(v, prefix + k + ".")
    elif isinstance(doc, list):
        for v in doc:
            out |= _keys(v, prefix + "[].")
    return out


def test_sim_fio_has_the_real_capture_shape():
    real_doc = json.loads(real("fio_seq_write_2jobs_json__fio3.33__captured.json"))
    sim_doc = json.loads(S.fio_output("seqwrite", 2, "write", 2**30, 2.0, 2**20))
    real_job_keys = _keys(real_doc["jobs"][0]["write"])
    assert _keys(sim_doc["jobs"][0]["write"]) == real_job_keys
    assert {"jobname", "groupid", "error", "read", "write", "trim"} <= set(sim_doc["jobs"][0])
    assert set(sim_doc["jobs"][0]["write"]["clat_ns"]["percentile"]) == set(
        real_doc["jobs"][0]["write"]["clat_ns"]["percentile"])


def test_sim_iperf3_has_the_real_capture_shape():
    real_doc = json.loads(real("iperf3_J_tcp_loopback__iperf3.12__captured.json"))
    sim_doc = json.loads(S.iperf3_output("10.0.0.1", "10.0.0.2", 9e10, 3))
    for part in ("sum_sent", "sum_received"):
        assert set(sim_doc["end"][part]) == set(real_doc["end"][part])
    assert set(sim_doc["end"]["streams"][0]["sender"]) <= set(real_doc["end"]["streams"][0]["sender"])
    assert set(sim_doc["end"]) == set(real_doc["end"])


def test_sim_ping_and_fabtests_have_the_real_lines():
    real_ping = real("ping_c5_loopback__iputils20221126__captured.txt").splitlines()
    sim_ping = S.ping_output("10.0.0.2", [0.05, 0.06, None, 0.05]).splitlines()
    shape = lambda line: re.sub(r"\d+(\.\d+)?", "N", line.replace("127.0.0.1", "A").replace("10.0.0.2", "A"))
    assert shape(sim_ping[0]) == shape(real_ping[0]) and shape(sim_ping[1]) == shape(real_ping[1])
    assert shape(sim_ping[-1]) == shape(real_ping[-1]) and shape(sim_ping[-2]) == shape(real_ping[-2])
    real_pp = real("fi_pingpong_efa_test_sh__aws_cdi_sdk_install_guide.txt").splitlines()
    sim_pp = S.pingpong_output(15.0, 7000.0, sizes=(64, 256, 1024, 4096, 65536, 2**20)).splitlines()  # the capture's sizes
    assert sim_pp[0] == real_pp[2]  # the header, byte for byte
    assert [line.split()[0] for line in sim_pp[1:]] == [line.split()[0] for line in real_pp[3:]]


def test_healthy_simulated_stages_pass():
    rng = random.Random(7)
    cfg, plan = storage(dataset_tib=100, checkpoint_tib=1)
    checks = A.storage_checks(bundle(S.storage_outputs(cfg, plan, P5, CFG, rng)), cfg, plan, P5, CFG)
    checks += A.network_checks(bundle(S.network_outputs(PAIRS, ADDR, P5, CFG, rng)), PAIRS, P5, CFG)
    hosts = [n for n in NODES[:2] for _ in range(8)]
    checks += A.smoke_checks(bundle({A.TRAIN_SMOKE: S.smoke_output(hosts, 30, rng, 100_000)}), P5, CFG)
    assert [c for c in checks if c.verdict is not Verdict.PASS] == []


def test_seeded_faults_are_caught_where_they_were_planted():
    rng = random.Random(7)
    cfg, plan = storage(dataset_tib=100, checkpoint_tib=1)
    slow = S.AcceptanceFaults(slow_storage=0.5)
    st = A.stage_outcome("storage", A.storage_checks(bundle(S.storage_outputs(cfg, plan, P5, CFG, rng, slow)),
                                                     cfg, plan, P5, CFG))
    assert not st.passed and {"storage-write-slow", "storage-read-slow", "storage-metadata-slow"} <= set(st.reason_codes)
    bad_link = S.AcceptanceFaults(bad_mgmt_nodes=frozenset({"n3"}))
    net = A.network_checks(bundle(S.network_outputs(PAIRS, ADDR, P5, CFG, rng, bad_link)), PAIRS, P5, CFG)
    failing = {c.check_id for c in net if c.verdict.blocks_admission}
    assert failing == {"net.tcp[n2--n3]", "net.rtt[n2--n3]"}
    hosts = [n for n in NODES[:2] for _ in range(8)]
    div = S.AcceptanceFaults(diverging_node="n1")
    smoke = A.smoke_checks(bundle({A.TRAIN_SMOKE: S.smoke_output(hosts, 30, rng, 100_000, div)}), P5, CFG)
    bad = [c for c in smoke if c.verdict.blocks_admission]
    assert [c.reason_code for c in bad] == ["smoke-ranks-diverged"] and "on n1" in bad[0].message


@pytest.mark.parametrize("seed", range(5))
def test_sim_outputs_are_deterministic_per_seed(seed):
    cfg, plan = storage()
    one = S.storage_outputs(cfg, plan, P5, CFG, random.Random(seed))
    two = S.storage_outputs(cfg, plan, P5, CFG, random.Random(seed))
    assert one == two


def test_modelled_stage_durations_follow_the_file_system():
    big_cfg, big = storage(dataset_tib=400, checkpoint_tib=1)
    small_cfg, small = storage(dataset_tib=10, checkpoint_tib=1)
    fast = S.stage_seconds(big_cfg, big, P5, CFG)
    slow = S.stage_seconds(small_cfg, small, P5, CFG)
    assert big.aggregate_throughput_mbs > small.aggregate_throughput_mbs
    assert slow["storage"] > fast["storage"] > 0
    assert slow["network"] == fast["network"] > 0 and slow["smoke"] == fast["smoke"] > S.SMOKE_STARTUP_S
