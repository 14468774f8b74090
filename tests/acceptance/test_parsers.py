"""The acceptance tools' parsers against real captures (tests/fixtures/real/SOURCES.md)."""

from __future__ import annotations

import json

import pytest

from gpufleet.gates.parsers import fabtests, fio, iperf3, ping, train
from tests.acceptance.helpers import real


def test_fio_real_two_job_write_sums_the_jobs():
    text = real("fio_seq_write_2jobs_json__fio3.33__captured.json")
    run = fio.parse_json(text)
    doc = json.loads(text)
    assert run.version == "fio-3.33" and len(run.jobs) == 2 and not run.problems
    assert run.bw_bytes("write") == sum(j["write"]["bw_bytes"] for j in doc["jobs"])
    assert run.io_bytes("write") == 2 * 32 * 2**20
    assert run.bw_bytes("read") == 0
    assert run.runtime_s("write") == max(j["write"]["runtime"] for j in doc["jobs"]) / 1000


def test_fio_real_random_read_latency_percentiles():
    run = fio.parse_json(real("fio_randread_4k_json__fio3.33__captured.json"))
    job = run.jobs[0]
    assert job.read.iops > 0 and job.read.clat_p99_ns is not None and job.read.clat_p99_ns >= job.read.clat_p50_ns


def test_fio_real_filecreate_counts_file_operations():
    run = fio.parse_json(real("fio_filecreate_json__fio3.33__captured.json"))
    assert run.jobs[0].read.iops > 0 and run.jobs[0].error == 0


def test_fio_leading_warnings_and_garbage():
    text = "fio: this platform does not support process shared mutexes\n" + real(
        "fio_randread_4k_json__fio3.33__captured.json")
    assert len(fio.parse_json(text).jobs) == 1
    assert fio.parse_json("fio: failed to open directory").problems
    assert "invalid" in fio.parse_json("{not json").problems[0]
    assert fio.parse_json('{"jobs": []}').problems == ("no jobs in fio output",)


def test_iperf3_real_loopback_and_refused():
    ok = iperf3.parse_json(real("iperf3_J_tcp_loopback__iperf3.12__captured.json"))
    assert ok.error is None and ok.received_bps > 1e9 and ok.retransmits is not None and ok.streams == 1
    bad = iperf3.parse_json(real("iperf3_J_connection_refused__iperf3.12__captured.json"))
    assert bad.received_bps is None and "Connection refused" in bad.error
    assert iperf3.parse_json("").error.startswith("no JSON")
    assert "did not finish" in iperf3.parse_json('{"start": {}, "end": {}}').error


def test_ping_real_summary_and_total_loss():
    res = ping.parse_summary(real("ping_c5_loopback__iputils20221126__captured.txt"))
    assert (res.transmitted, res.received, res.loss_percent) == (5, 5, 0.0)
    assert res.rtt_min_ms <= res.rtt_avg_ms <= res.rtt_max_ms
    lost = ping.parse_summary("--- 10.0.0.9 ping statistics ---\n"
                              "3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2030ms\n")
    assert (lost.received, lost.errors, lost.loss_percent, lost.rtt_avg_ms) == (0, 3, 100.0, None)
    assert ping.parse_summary("ping: connect: Network is unreachable\n").problems


def test_fabtests_real_pingpong_table():
    res = fabtests.parse_table(real("fi_pingpong_efa_test_sh__aws_cdi_sdk_install_guide.txt"))
    assert [r.bytes for r in res.rows] == [64, 256, 1024, 4096, 65536, 2**20]
    assert res.smallest.usec_per_xfer == 1362.35 and res.largest.mb_per_s == 2359.00
    assert res.rows[0].iterations == 10 and not res.errors


def test_fabtests_rma_bw_table_with_name_column_and_rank_prefix():
    text = ("0: name    bytes   iters   total   time     MB/sec    usec/xfer   Mxfers/sec\n"
            "0: write_8k 8k      10k     78m     0.02s   3932.16      2.08       0.48\n"
            "0: write_1m 1m      1k      1000m   0.08s  12104.55     86.63       0.01\n")
    res = fabtests.parse_table(text)
    assert [(r.bytes, r.mb_per_s) for r in res.rows] == [(8192, 3932.16), (2**20, 12104.55)]
    assert res.rows[0].iterations == 10000  # cnt_str: "10k" is 10 x 1000 (fabtests common/shared.c)


def test_fabtests_failure_lines():
    res = fabtests.parse_table("fi_getinfo(): -61 (No data available)\n")
    assert not res.rows and res.errors == ("fi_getinfo(): -61 (No data available)",)
    assert fabtests.parse_table("").errors == ("no fabtests result table in the output",)


@pytest.mark.parametrize("token,value", [("64", 64), ("1k", 1024), ("1.2m", int(1.2 * 2**20)), ("=10", 10),
                                         ("19g", 19 * 2**30), ("x", None)])
def test_fabtests_sizes(token, value):
    assert fabtests.size_value(token) == value


def _line(**over: object) -> str:
    doc = {"gpufleet_smoke": 1, "world_size": 2, "backend": "gloo", "steps": 3, "loss": [4.0, 2.0, 1.0],
           "samples_per_second": 900.0, "allreduce_ms": [1.0, 2.0, 3.0], "data_loading_share": 0.1,
           "ranks_agree": True, "checksums": [1.5, 1.5], "hosts": ["a", "b"]}
    doc.update(over)
    return json.dumps(doc)


def test_train_result_among_srun_lines():
    out = train.parse_output(f"1: warning: something\n0: {_line()}\n")
    assert out.result.world_size == 2 and out.result.loss == (4.0, 2.0, 1.0)


def test_train_result_missing_duplicated_or_malformed():
    assert "no smoke result" in train.parse_output("Traceback ...\nRuntimeError: boom\n").problems[0]
    assert "2 smoke result lines" in train.parse_output(f"{_line()}\n{_line()}\n").problems[0]
    assert "malformed" in train.parse_output(_line(loss="high") + "\n").problems[0]


def test_fio_outputs_of_several_clients_merge_into_one_document():
    one = real("fio_seq_write_2jobs_json__fio3.33__captured.json")
    merged = fio.parse_json(fio.merge_outputs(["fio: a warning\n" + one, one]))
    assert len(merged.jobs) == 4 and merged.version == "fio-3.33"
    assert merged.bw_bytes("write") == 2 * fio.parse_json(one).bw_bytes("write")
