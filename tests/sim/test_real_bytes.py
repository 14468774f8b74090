"""The simulator writes the real tools' bytes (issue 19): each rendered format held against a real
capture in tests/fixtures/real (SOURCES.md names each one's origin and licence) or, where none
exists, against the printf formats of the tool's own source, named in the test. Same sections
and keys in the same nesting, the same column widths and number formats, values consistent with
each other."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpufleet.gates import bundle as B
from gpufleet.gates import synth
from gpufleet.gates.parsers import fabtests, nccl_debug, nccl_tests, nvidia_smi
from gpufleet.sim import acceptance as S
from gpufleet.sim import nccl_text
from gpufleet.sim.render import DRIVER_CUDA, NodeLook, render_files

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PINGPONG_REAL = "fi_pingpong_efa_test_sh__aws_cdi_sdk_install_guide.txt"
NCCL_219_REAL = "nccl_all_reduce_perf__1gpu_h200_nccl2.28.9_debug_info__captured.txt"


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def look(fault: str | None = None) -> NodeLook:
    return NodeLook(instance_type="p5.48xlarge", os="al2023", versions=tuple(sorted(synth.DEFAULT_VERSIONS.items())),
                    fault=fault, systemic="none", factor=1.0, dcgm_level=2)


@pytest.fixture(scope="module")
def healthy():
    return render_files(look())


def ends(line: str) -> list[int]:
    """Where each whitespace-separated field ends: a printf layout, independent of the digits."""
    return [m.end() for m in re.finditer(r"\S+", line)]


# --- fabtests --------------------------------------------------------------------------------

def test_fabtests_sizes_and_counts_print_as_size_str_and_cnt_str():
    """util/pingpong.c size_str (binary, truncated tenth below 10) and cnt_str (decimal, truncated)."""
    assert [S.fab_size_str(n) for n in (0, 64, 1280, 5120, 20 * 2**20, 2_000_000, 1536, 6 * 2**20)] == \
        ["0", "64", "1.2k", "5k", "20m", "1.9m", "1.5k", "6m"]
    assert [S.fab_cnt_str(n) for n in (10, 999, 1000, 1999, 20000, 2_500_000)] == ["10", "999", "1k", "1k", "20k", "2m"]


def test_pingpong_rows_have_the_real_capture_columns():
    theirs = real(PINGPONG_REAL).splitlines()[2:]
    sizes = [fabtests.size_value(line.split()[0]) for line in theirs[1:]]
    ours = S.pingpong_output(18.0, 5000.0, iters=10, sizes=sizes).splitlines()
    assert ours[0] == theirs[0]  # the header, byte for byte
    for mine, capture in zip(ours[1:], theirs[1:], strict=True):
        assert mine.split()[:4] == capture.split()[:4]  # bytes, #sent, =#ack, total: the same strings
        assert ends(mine) == ends(capture), (mine, capture)
    first, second = (float(line.split()[6]) for line in ours[1:3])
    assert first > 1000 > 30 > second  # the first row carries the connection set-up, as on the capture


def test_pingpong_time_column_is_every_ping_and_pong():
    row = S.pingpong_output(20.0, 1e9, iters=1000, sizes=[64, 4096]).splitlines()[2]
    size, sent, _, total, time_s, mbs, usec, _ = row.split()
    assert (sent, total) == ("1k", "7.8m")  # 1000 x 4096 x 2 bytes
    assert float(time_s.rstrip("s")) == pytest.approx(1000 * 2 * float(usec) / 1e6, abs=0.006)
    assert float(mbs) == pytest.approx(1000 * 4096 * 2 / (1000 * 2 * float(usec)), rel=0.01)


def test_pingpong_minus_S_all_runs_every_size_up_to_the_largest_message():
    sizes = S.pingpong_sizes()
    assert sizes[:8] == [0, 1, 2, 3, 4, 6, 8, 12] and sizes[-2:] == [4 * 2**20, 6 * 2**20]
    table = fabtests.parse_table(S.pingpong_output(16.0, 7000.0, iters=S.FABRIC_ITERATIONS))
    assert not table.problems and [r.bytes for r in table.rows] == sizes
    assert {r.iterations for r in table.rows} == {1000}


def test_rma_bw_follows_fabtests_show_perf_no_real_capture_exists():
    """No real fi_rma_bw capture was found (tests/fixtures/real/SOURCES.md); this holds the sim to
    fabtests/common/shared.c show_perf (ofiwg/libfabric main): header printf
    "%-8s%-8s%-8s%8s %10s%13s%13s", rows "%-8s%-8s%-8s%8.2fs%10.2f%11.2f%11.2f"."""
    text = S.rma_bw_output(11_000.0, iters=1000)
    lines = text.splitlines()
    assert lines[0] == "bytes   iters   total       time     MB/sec    usec/xfer   Mxfers/sec"
    row = re.compile(r"^(\S+ *)(\S+ *)(\S+ *) *\d+\.\d\ds *\d+\.\d\d *\d+\.\d\d *\d+\.\d\d$")
    assert all(row.match(line) and len(line) == 8 * 3 + 9 + 10 + 11 + 11 for line in lines[1:]), lines
    parsed = fabtests.parse_table(text)
    assert not parsed.problems and [r.bytes for r in parsed.rows] == list(S.RMA_BW_SIZES)
    for r in parsed.rows:  # MB/sec is bytes per microsecond of the row's own usec/xfer
        assert r.mb_per_s == pytest.approx(r.bytes / r.usec_per_xfer, rel=0.02)
    default = fabtests.parse_table(S.rma_bw_output(11_000.0))
    assert [r.iterations for r in default.rows] == [20000, 20000, 20000, 20000, 2000, 200]  # size_to_count


# --- nccl-tests --------------------------------------------------------------------------------

def test_nccl_float_strings_follow_getfloatstr():
    """src/util.cu getFloatStr: 2, 1, 0 decimals, whichever fits, else an exponent; the real
    2.19.6 capture's `2113.9` and `5e+06` at width 6."""
    assert nccl_text.float_str(507.95, 7) == " 507.95"
    assert nccl_text.float_str(2113.9, 6) == "2113.9"
    assert nccl_text.float_str(5e6, 6) == " 5e+06"
    assert nccl_text.float_str(17286.4, 7) == "17286.4"
    assert nccl_text.float_str(3.0, 7) == "   3.00"  # below 10 ms: decimals, never "3"


def test_nccl_intra_has_the_real_219_layout(healthy):
    files, _ = healthy
    ours = files[B.NCCL_INTRA].splitlines()
    assert ours.pop(0) == "# Writing JSON output to /var/tmp/gpufleet-preflight/.nccl-all-reduce-intra.json"  # -J
    theirs = real(NCCL_219_REAL).splitlines()
    shape = lambda line: re.sub(r"\d+", "N", line)
    assert shape(ours[0]) == shape(theirs[0]) and shape(ours[2]) == shape(theirs[2]) and ours[1] == theirs[1]
    assert "# Using devices" in ours and ours[ours.index("# Using devices") + 1].startswith("#  Rank  0 Group  0 Pid")
    rank = re.compile(r"#  Rank [ \d]\d Group [ \d]\d Pid [ \d]{5}\d on [ \S]{9}\S+ device [ \d]\d "
                      r"\[[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\] NVIDIA H\d00.*")  # "%2d ... %6d on %10s device %2d"
    assert rank.fullmatch(next(line for line in theirs if line.startswith("#  Rank")))
    assert sum(bool(rank.fullmatch(line)) for line in ours) == 8
    table = [line for line in theirs if line.lstrip("#").lstrip().startswith(("size", "(B)", "out-of-place"))]
    assert [line for line in ours if line.lstrip("#").lstrip().startswith(("size", "(B)", "out-of-place"))] == table
    real_row = next(line for line in theirs if line.startswith("  1073741824"))
    our_row = next(line for line in ours if line.startswith("  1073741824"))
    assert ends(our_row) == ends(real_row)
    footer = lambda lines: [re.sub(r": [\d.]+ $", ": X ", line)
                            for line in lines[lines.index("# Out of bounds values : 0 OK"):][:6]]
    assert footer(ours) == footer(theirs)  # ... concluded, finalizeFooter's "#", writeErrors' empty line
    code = re.search(r"nccl-headers=(\d+)", ours[0]).group(1)  # type: ignore[union-attr]
    version = re.search(r"NCCL version (\S+)\+cuda", files[B.NCCL_INTRA]).group(1)  # type: ignore[union-attr]
    assert int(code) == nccl_text.nccl_code(version) == nccl_text.nccl_code(synth.DEFAULT_VERSIONS["nccl"])
    parsed = nccl_tests.parse_text(files[B.NCCL_INTRA])
    assert not parsed.problems and len(parsed.rows) == 5
    assert parsed.avg_busbw == pytest.approx(sum(r.out_of_place.busbw for r in parsed.rows) / 5, abs=0.01)


def test_nccl_intra_json_is_format_version_3_as_util_cu_writes_it(healthy):
    """No real -J capture is in tests/fixtures/real; the document follows nccl-tests 2.19.6
    src/util.cu (jsonOutputInit, writeDeviceReport, writeBenchmarkLine*, writeResultFooter,
    writeErrors, jsonOutputFinalize) and agrees with the same run's text table."""
    files, _ = healthy
    text = files[B.NCCL_INTRA_JSON]
    assert not re.search(r'[,:\[{] ', text) and re.search(r'"bus_bw":\d+\.\d{6},', text)  # no spaces, "%lf"
    doc = json.loads(text)
    assert list(doc) == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                         "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]
    assert doc["version"] == 3 and doc["config"]["minimum_bytes"] == 2**30 and len(doc["config"]["devices"]) == 1
    assert doc["results"][0]["root"] == "    -1" and doc["average_bus_bandwidth"]["okay"] == "unchecked"
    assert doc["out_of_bounds"]["okay"] == "true" and isinstance(doc["results"][0]["out_of_place"]["nwrong"], float)
    as_json, as_text = nccl_tests.parse_json(text), nccl_tests.parse_text(files[B.NCCL_INTRA])
    assert not as_json.problems and [r.size for r in as_json.rows] == [r.size for r in as_text.rows]
    assert [r.out_of_place.busbw for r in as_json.rows] == pytest.approx([r.out_of_place.busbw for r in as_text.rows],
                                                                          abs=0.01)
    assert as_json.avg_busbw == pytest.approx(as_text.avg_busbw, abs=0.01)


def test_nccl_debug_lines_are_the_plugins_own_words(healthy):
    files, _ = healthy
    first, *lines = files[B.NCCL_EFA_LOOPBACK].splitlines()
    assert first == "gpufleet peermem: efa_nv_peermem"  # the preflight's own line before NCCL's (M9)
    tail = lambda line: line.split(" NCCL INFO ", 1)[1]
    major_minor = ".".join(synth.DEFAULT_VERSIONS["libfabric"].split(".")[:2])  # "%u.%u" of fi_version()
    assert f"NET/OFI Using Libfabric version {major_minor}" in [tail(x) for x in lines]
    assert not any(line.endswith(".so.") for line in lines)
    real_plugin = next(tail(x) for x in real(NCCL_219_REAL).splitlines() if "NET/Plugin: Could not find" in x)
    assert real_plugin == "NET/Plugin: Could not find: libnccl-net.so"
    assert nccl_debug.parse_net(files[B.NCCL_EFA_LOOPBACK]).efa_used


# --- nvidia-smi ---------------------------------------------------------------------------------

def fabric_section(text: str) -> list[str]:
    """The first GPU's Fabric section: each line's indentation and key."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip() == "Fabric")
    out = [lines[i]]
    for line in lines[i + 1:]:
        if len(line) - len(line.lstrip()) <= len(lines[i]) - len(lines[i].lstrip()):
            break
        out.append(line.split(":")[0].rstrip())
    return out


H100_Q = "nvidia_smi_q__h100_1gpu_drv590__nvidia_gpu_exporter_capture.txt"


def key_paths(text: str) -> list[tuple[str, ...]]:
    """Each GPU section's keys with their parents, in order (the first GPU's)."""
    from gpufleet.sim.smi_q_layout import paths

    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("GPU 00000000:"))
    end = next((n for n, line in enumerate(lines) if n > start and line.startswith("GPU 00000000:")), len(lines))
    return [p for p, _ in paths(lines[start + 1:end])]


def test_q_has_every_section_of_the_real_h100_capture_in_order(healthy):
    files, _ = healthy
    assert key_paths(files[B.SMI_Q]) == key_paths(real(H100_Q))
    assert len({p[0] for p in key_paths(files[B.SMI_Q])}) >= 60
    assert fabric_section(files[B.SMI_Q]) == fabric_section(real(H100_Q))
    q = nvidia_smi.parse_q(files[B.SMI_Q])
    assert len(q.gpus) == 8 and not q.problems
    uuids = re.findall(r"GPU UUID\s+: (\S+)", files[B.SMI_Q])
    assert uuids == [re.search(r"UUID: (GPU-[^)]+)", line).group(1)  # type: ignore[union-attr]
                     for line in files[B.NVLINK_S].splitlines() if line.startswith("GPU ")]
    bus_ids = re.findall(r"Bus Id\s+: (\S+)", files[B.SMI_Q])
    assert bus_ids == [line.split(", ")[4] for line in files[B.QUERY_GPU].splitlines()[1:]]


def test_q_healthy_fabric_health_reads_na_as_on_the_real_h100(healthy):
    files, _ = healthy
    section = files[B.SMI_Q].split("    Fabric\n", 1)[1].split("    Processes", 1)[0]
    real_section = real(H100_Q).split("    Fabric\n", 1)[1].split("    Processes", 1)[0]
    assert section == real_section  # Completed/Success, clique 0, the zero cluster UUID, health N/A


def test_q_cuda_version_is_the_drivers():
    for name in ("nvidia_smi_q__h200_1gpu_vm_drv580__captured.txt",
                 "nvidia_smi_q__h200_1gpu_vm_drv590.48.01__nvidia_gpu_exporter_capture.txt"):
        text = real(name)
        driver = re.search(r"Driver Version\s+: (\S+)", text).group(1)  # type: ignore[union-attr]
        cuda = re.search(r"CUDA Version\s+: (\S+)", text).group(1)  # type: ignore[union-attr]
        assert DRIVER_CUDA[driver.split(".")[0]] == cuda
    files, _ = render_files(look())
    assert re.search(r"CUDA Version\s+: 12\.8\n", files[B.SMI_Q])  # the BOM's driver 570


def test_topo_m_prints_as_the_real_capture(healthy):
    files, _ = healthy
    ours = files[B.TOPO_M].splitlines()
    theirs = real("nvidia_smi_topo_m__h200_1gpu_vm__captured.txt").splitlines()
    head = lambda line: re.sub(r"GPU\d(\tGPU\d)*", "GPUS", line)  # the ANSI underline around the header row
    assert head(ours[0]) == head(theirs[0]) and ours[0].startswith("\t\x1b[4mGPU0\t") and ours[0].endswith("\x1b[0m")
    assert ours[ours.index("Legend:"):] == theirs[theirs.index("Legend:"):]
    tail = lambda line: re.sub(r"\d+", "N", "\t".join(line.split("\t")[-4:]))  # CPU, NUMA, empty, GPU NUMA ID
    assert {tail(line) for line in ours[1:9]} == {tail(theirs[1])} == {"N-N\tN\t\tN/A"}
    assert nvidia_smi.parse_topo(files[B.TOPO_M]).devices == tuple(f"GPU{i}" for i in range(8))


def test_kernel_log_boots_the_nodes_own_kernel(healthy):
    """The boot line names the kernel versions.json reports (it said 6.1.112 beside 6.1.141)."""
    files, _ = healthy
    first = files[B.KERNEL_LOG].splitlines()[0]
    assert re.search(rf"kernel: Linux version {re.escape(synth.DEFAULT_VERSIONS['kernel'])} \(\S+\) \(gcc \(GCC\) "
                     r"[\d.]+, GNU ld .*\) #1 SMP PREEMPT_DYNAMIC$", first)
    reported = json.loads(files[B.VERSIONS])["kernel"]["output"].strip()
    assert reported in first


def test_fi_info_is_libfabric_2s_short_listing(healthy):
    files, _ = healthy
    blocks = files[B.FI_INFO].strip().split("\nprovider: ")
    assert len(blocks) == 2 * 32  # efa and efa-direct per device on libfabric 2.x
    assert all(re.fullmatch(r"(provider: )?efa\n    fabric: efa(-direct)?\n    domain: rdmap\d+s\d+-rdm\n"
                            r"    version: 201\.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA", b) for b in blocks)
    old = dict(synth.DEFAULT_VERSIONS, libfabric="1.22.0amzn4.0")
    files_1x, _ = render_files(NodeLook(**{**look().__dict__, "versions": tuple(sorted(old.items()))}))
    assert "efa-direct" not in files_1x[B.FI_INFO] and "version: 122.0" in files_1x[B.FI_INFO]


def test_remapped_rows_csv_is_the_real_capture_shape(healthy):
    files, _ = healthy
    theirs = real("nvidia_smi_remapped_rows__h200_drv580__captured.csv").splitlines()
    ours = files[B.REMAPPED_ROWS].splitlines()
    shape = lambda line: re.sub(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d", "BUS", line)
    assert ours[0] == theirs[0] and all(shape(line) == shape(theirs[1]) for line in ours[1:]) and len(ours) == 9
    pending, _ = render_files(look("row-remap-pending"))
    table = nvidia_smi.read_query_table(pending[B.REMAPPED_ROWS])
    assert not table.problems and [r["remapped_rows.pending"] for r in table.records()].count("Yes") == 1


@pytest.mark.parametrize("fault", [None, "fabric-unhealthy", "fabric-degraded-bandwidth", "fabric-in-progress",
                                   "fabric-insufficient-resources"])
def test_fabric_csv_and_q_say_the_same(fault):
    files, _ = render_files(look(fault))
    rows = list(nvidia_smi.read_query_table(files[B.FABRIC_QUERY]).records())
    sections = files[B.SMI_Q].split("\n    Fabric\n")[1:]
    assert len(rows) == len(sections) == 8
    for row, section in zip(rows, sections, strict=True):
        got = dict(re.findall(r"^\s+(State|Status|CliqueId|ClusterUUID|Summary|Bandwidth|Route Unhealthy)\s+: (.*)$",
                              section.split("\n    Processes")[0], re.M))
        cell = lambda k: "N/A" if row[k] is None else row[k]  # the parser reads N/A as no value
        assert tuple(cell(k) for k in ("fabric.state", "fabric.status", "fabric.cliqueId", "fabric.clusterUuid",
                                       "fabric.health.summary", "fabric.health.bandwidth",
                                       "fabric.health.route_unhealthy")) == \
            (got["State"], got["Status"], got["CliqueId"], got["ClusterUUID"], got["Summary"], got["Bandwidth"],
             got["Route Unhealthy"])


# --- fio and iperf3 ------------------------------------------------------------------------------

def keys(doc, prefix: str = "") -> set[str]:
    if isinstance(doc, dict):
        out = set()
        for k, v in doc.items():
            if k == "percentile":
                out.add(prefix + k)
                continue
            out |= {prefix + k} | keys(v, prefix + k + ".")
        return out
    return set()


def test_fio_job_has_every_block_of_the_real_capture():
    real_doc = json.loads(real("fio_seq_write_2jobs_json__fio3.33__captured.json"))
    sim_doc = json.loads(S.fio_output("seqwrite", 1, "write", 2**30, 12.0, 2**20,
                                      options={"directory": "/fsx/x", "size": "4G", "end_fsync": "1"}))
    real_job, job = real_doc["jobs"][0], sim_doc["jobs"][0]
    assert keys(job) - {"job options." + k for k in job["job options"]} == \
        keys(real_job) - {"job options." + k for k in real_job["job options"]}
    assert set(sim_doc) == set(real_doc) - {"disk_util"}  # a network file system has no disk_util
    assert sim_doc["timestamp"] > 0 and sim_doc["timestamp_ms"] == sim_doc["timestamp"] * 1000
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}", sim_doc["time"])
    w = job["write"]
    assert w["bw_bytes"] == pytest.approx(w["io_bytes"] * 1000 / w["runtime"], rel=1e-6)
    assert w["iops"] == pytest.approx(w["total_ios"] * 1000 / w["runtime"], rel=1e-6)
    assert w["bw_samples"] == w["runtime"] // 500 > 0 and w["bw_mean"] == pytest.approx(w["bw_bytes"] / 1024)
    assert w["lat_ns"]["mean"] >= w["clat_ns"]["mean"]
    shares = sum(job[k][b] for k in ("latency_ns", "latency_us", "latency_ms") for b in job[k])
    assert shares == pytest.approx(100.0)


def test_fio_bundle_is_one_job_per_client_merged_as_the_collector_merges():
    from gpufleet.catalog import get
    from gpufleet.plan.storage import plan_storage  # noqa: F401 (the plan comes from the acceptance tests' helper)

    from tests.acceptance.test_sim_outputs import CFG, storage

    cfg, plan = storage(dataset_tib=100, checkpoint_tib=1)
    files = S.storage_outputs(cfg, plan, get("p5.48xlarge"), CFG, __import__("random").Random(3), clients=4)
    doc = json.loads(files["fio-seq-write.json"] if "fio-seq-write.json" in files else next(iter(files.values())))
    assert set(doc) == {"fio version", "jobs"} and len(doc["jobs"]) == 4
    assert {j["job options"]["numjobs"] for j in doc["jobs"]} == {"1"}
    assert len({j["job options"]["directory"] for j in doc["jobs"]}) == 4


def test_iperf3_has_every_key_and_sums_that_add_up():
    real_doc = json.loads(real("iperf3_J_tcp_loopback__iperf3.12__captured.json"))
    doc = json.loads(S.iperf3_output("10.0.0.1", "10.0.0.2", 9e10, 37))
    assert set(doc["start"]) == set(real_doc["start"])
    assert keys(doc["intervals"][0]) == keys(real_doc["intervals"][0])
    assert set(doc["intervals"][0]["streams"][0]) == set(real_doc["intervals"][0]["streams"][0])
    assert len(doc["intervals"]) == 10
    end = doc["end"]
    assert sum(s["sender"]["bytes"] for s in end["streams"]) == end["sum_sent"]["bytes"]
    assert sum(s["receiver"]["bytes"] for s in end["streams"]) == end["sum_received"]["bytes"]
    assert sum(s["sender"]["retransmits"] for s in end["streams"]) == end["sum_sent"]["retransmits"] == 37
    assert sum(i["sum"]["bytes"] for i in doc["intervals"]) == end["sum_sent"]["bytes"]
    for part in (end["sum_sent"], *(i["sum"] for i in doc["intervals"])):
        assert part["bits_per_second"] == pytest.approx(part["bytes"] * 8 / part["seconds"])


# --- the field's quirks ----------------------------------------------------------------------------

def changed(fault: str) -> dict[str, str]:
    base, _ = render_files(look())
    files, _ = render_files(look(fault))
    return {k: v for k, v in files.items() if base.get(k) != v}


def test_each_quirk_changes_only_what_it_names():
    assert set(changed("fabric-unhealthy")) == {B.SMI_Q, B.FABRIC_QUERY}
    assert set(changed("fabric-in-progress")) == {B.SMI_Q, B.FABRIC_QUERY, B.QUERY_GPU}
    assert set(changed("xid-mig")) == {B.KERNEL_LOG}
    assert set(changed("tool-missing")) == {B.DCGM_DIAG}
    assert set(changed("nic-count-short")) == {B.FI_INFO, B.NCCL_EFA_LOOPBACK}
    assert set(changed("output-unreadable")) == {B.SMI_Q}
    assert changed("latent") == {}


def test_quirks_read_as_the_field_prints_them():
    q = changed("fabric-unhealthy")[B.SMI_Q]
    assert re.search(r"Health\n\s+Summary\s+: Unhealthy\n\s+Bandwidth\s+: Full\n", q)
    assert q.count("Summary                                    : Unhealthy") == 1
    assert "Bandwidth                                  : Degraded" in changed("fabric-degraded-bandwidth")[B.SMI_Q]
    assert re.search(r"NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00 GPU-I:05\): 48, ", changed("xid-mig")[B.KERNEL_LOG])
    assert changed("tool-missing")[B.DCGM_DIAG] == "bash: line 1: dcgmi: command not found\n"
    assert "(found 16 nics)" in changed("nic-count-short")[B.NCCL_EFA_LOOPBACK]
    assert changed("nic-count-short")[B.FI_INFO].count("provider: efa") == 2 * 16
    files, _ = render_files(look("plugin-beta"))
    assert f"aws-ofi-nccl {synth.DEFAULT_VERSIONS['aws_ofi_nccl']}-beta" in files[B.NCCL_EFA_LOOPBACK]
    cut = changed("output-unreadable")[B.SMI_Q]
    assert len(nvidia_smi.parse_q(cut).gpus) < 8


# --- ping, lspci, versions, dmesg, the multi-node NCCL log ---------------------------------------

PING_REAL = "ping_c5_loopback__iputils20221126__captured.txt"
PING_NO_REPLY_REAL = "ping_c3_no_reply__iputils20221126__captured.txt"
PCI_IDS = "pci_ids_amazon_1d0f_and_classes__pciids2023.04.10__debian_pci.ids.txt"


def _elapsed(text: str) -> tuple[str, int]:
    """The text with iputils' elapsed `time Nms` masked, and N (the one field a rerun changes)."""
    m = re.search(r", time (\d+)ms$", text, re.M)
    assert m, text
    return text[:m.start(1)] + "N" + text[m.end(1):], int(m.group(1))


@pytest.mark.parametrize("name,address,rtts", [
    (PING_REAL, "127.0.0.1", [0.042, 0.044, 0.035, 0.038, 0.035]),
    (PING_NO_REPLY_REAL, "192.0.2.77", [None, None, None]),
])
def test_ping_prints_byte_for_byte_as_iputils_given_the_same_replies(name, address, rtts):
    """The real run's round trips in, the real bytes out: iputils' integer avg and mdev (0.038 and
    0.003, where float arithmetic prints 0.039 and 0.004), the blank line a run with no reply ends
    in; the elapsed time is (count - 1) x 0.2 s plus what the scheduler added (17-20 ms here)."""
    ours, ours_ms = _elapsed(S.ping_output(address, rtts))
    want, want_ms = _elapsed(real(name))
    assert ours == want
    assert (len(rtts) - 1) * 200 <= ours_ms < len(rtts) * 200 and (len(rtts) - 1) * 200 <= want_ms < len(rtts) * 200


def test_ping_loss_prints_as_percent_g():
    """`%g%% packet loss`: one of three lost is 33.3333%, as iputils prints it; the gate reads it."""
    from gpufleet.gates.parsers import ping
    text = S.ping_output("10.0.0.2", [0.05, None, 0.05])
    assert "3 packets transmitted, 2 received, 33.3333% packet loss, time " in text
    assert ping.parse_summary(text).loss_percent == pytest.approx(33.3333)


def _pci_ids() -> tuple[str, set[str], set[str]]:
    """(the vendor name of 1d0f, its device names, the class names) from pci.ids."""
    vendor, devices, classes, in_amazon = "", set(), set(), False
    for line in real(PCI_IDS).splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("1d0f  "):
            vendor, in_amazon = line.split("  ", 1)[1], True
        elif line.startswith("C "):
            in_amazon = False
        elif line.startswith("\t") and not line.startswith("\t\t"):
            name = line.strip().split("  ", 1)[1]
            (devices if in_amazon else classes).add(name)
    return vendor, devices, classes


def test_lspci_lines_are_pciutils_default_lines_with_pci_ids_names(healthy):
    """No real `lspci -d 1d0f:` capture of a p5 exists in the fixtures: each line follows pciutils'
    default listing (lspci.c show_device: `bus:dev.fn class: vendor device`) with the names the
    PCI ID database gives vendor 1d0f and the classes (pci.ids 2023.04.10, Debian's pci.ids)."""
    vendor, devices, classes = _pci_ids()
    lines = healthy[0][B.LSPCI_EFA].splitlines()
    for line in lines:
        m = re.fullmatch(r"([0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ([^:]+): (.+)", line)
        assert m and m.group(2) in classes, line
        assert m.group(3).startswith(vendor + " ") and m.group(3)[len(vendor) + 1:] in devices, line
    assert len({line.split()[0] for line in lines}) == len(lines)  # one device per slot
    efa_lines = [x for x in lines if "Elastic Fabric Adapter (EFA)" in x]
    assert len(efa_lines) == catalog_efa() == len(nccl_debug_nics(healthy))
    from gpufleet.gates.parsers import efa
    assert efa.lspci_problems(healthy[0][B.LSPCI_EFA]) == ()


def catalog_efa() -> int:
    from gpufleet import catalog
    return catalog.get("p5.48xlarge").efa_interfaces


def nccl_debug_nics(healthy) -> list[int]:
    """The `(found N nics)` of the node's NCCL log, as a list of N placeholders."""
    n = nccl_debug.parse_net(healthy[0][B.NCCL_EFA_LOOPBACK]).nics
    return list(range(n or 0))


def test_versions_outputs_have_the_lines_of_each_components_real_example():
    """Each version command's rendered output against the real output gpufleet.gates.versions
    cites for it: the same lines with the version (and build numbers) masked. The driver renders the
    open kernel module's line (AL2023's nvidia-open; the row's source names that form), the NCCL path
    is AL2023's /usr/lib64 and the EFA installer lists its packages, as on the nodes the BOM builds."""
    from gpufleet.gates import versions
    shape = lambda text: [re.sub(r"[0-9a-f]{40}|\d+", "N", line) for line in text.strip().splitlines()]  # noqa: E731
    differ = {"nvidia_driver", "nccl", "efa_installer"}
    for c in versions.COMPONENTS:
        printed = versions.read_version(c.key, c.example)
        pin = {"kubelet": printed.split("-eks-")[0], "cuda": "12.8.1"}.get(c.key, printed)  # the BOM's pin forms
        ours, _ = synth.version_output(c.key, pin)
        assert versions.read_version(c.key, ours) == printed, c.key
        if c.key not in differ:
            assert shape(ours) == shape(c.example), c.key
    ours, _ = synth.version_output("efa_installer", "1.41.0")
    assert shape(ours)[:3] == shape(versions.BY_KEY["efa_installer"].example)
    driver, _ = synth.version_output("nvidia_driver", "570.172.08")
    assert driver.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  ")


def test_kernel_xid_lines_have_the_real_dmesg_shape():
    """Each Xid the simulator writes, against the real lines (imbue-ai/cluster-health doctests):
    `NVRM: Xid (PCI:dddd:bb:dd): N, pid=..., name=..., text`, the Xid 64 text word for word."""
    real_lines = [x for x in real("dmesg_xid_sxid_pcie_lines__imbue_doctests.log").splitlines() if "NVRM: Xid" in x]
    shape = re.compile(r"NVRM: Xid \(PCI:[0-9a-f]{4}:[0-9a-f]{2}:00\): (\d+), pid=('<unknown>'|\d+), "
                       r"name=(<unknown>|[\w.-]+), (.+)$")
    assert all(shape.search(x) for x in real_lines)
    real_64 = shape.search(next(x for x in real_lines if "): 64," in x)).group(4)
    from gpufleet.sim.render import FAULT_XID
    for fault, xid in FAULT_XID.items():
        files, _ = render_files(look(fault))
        line = files[B.KERNEL_LOG].splitlines()[-1] if xid != 79 else \
            next(x for x in files[B.KERNEL_LOG].splitlines() if "): 79," in x)
        m = shape.search(line)
        assert m and int(m.group(1)) == xid, line
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 \S+ kernel: NVRM: ", line)  # journalctl -o short-iso
        if xid == 64:
            assert m.group(4) == real_64


def test_the_multi_node_nccl_log_agrees_with_itself_and_the_node():
    """One 2-node run through the simulated launcher: the header's NCCL code is the INFO lines'
    version, every rank's host logs the plugin, the libfabric version the node has and its EFA count."""
    from tests.sim.conftest import make_project, make_spec, open_cloud
    from gpufleet.gates.launch import launch_spec
    from gpufleet.gates.parsers.common import strip_rank_prefix
    import tempfile
    root = Path(tempfile.mkdtemp(prefix="mn19-"))
    cloud = open_cloud(make_spec(target_gpus=80), make_project(root))
    cloud.provisioner.provision(1, cloud.plan.batch_nodes(1))
    nodes = [s.name for s in cloud.plan.batch_nodes(1)][:2]
    out = cloud.launcher.run([launch_spec("slurm", nodes, cloud.sku, cloud.versions, message_bytes=2**30)],
                             timeout_s=600)[0].output
    lines = [strip_rank_prefix(x) for x in out.splitlines()]
    nccl = cloud.versions["nccl"]
    header = next(x for x in lines if x.startswith("# nccl-tests version"))
    assert header.endswith(f"nccl-headers={nccl_text.nccl_code(nccl)} nccl-library={nccl_text.nccl_code(nccl)}")
    hosts = sorted({m.group(1) for x in lines if (m := re.search(r" on (\S+) device ", x))})
    assert len(hosts) == 2
    ranks = [x for x in lines if x.startswith("#  Rank")]
    assert len(ranks) == 2 * cloud.sku.gpus and "nGpus 1 " in next(x for x in lines if "nThread" in x)  # one GPU a rank
    info = [x for x in lines if " NCCL INFO " in x]
    for host in hosts:
        mine = [x.split(" NCCL INFO ", 1)[1] for x in info if x.startswith(host + ":")]
        assert f"NCCL version {nccl}+cuda{'.'.join(cloud.versions['cuda'].split('.')[:2])}" in mine
        assert f"NET/OFI Initializing aws-ofi-nccl {cloud.versions['aws_ofi_nccl']}" in mine
        libfabric = ".".join(cloud.versions["libfabric"].split("amzn")[0].split(".")[:2])
        assert f"NET/OFI Using Libfabric version {libfabric}" in mine
        assert any(x.endswith(f"(found {cloud.sku.efa_interfaces} nics)") for x in mine)
        assert "Using network Libfabric" in mine


@pytest.mark.parametrize("fault", [None, "dcgm-fail"])
def test_dcgm_3x_nodes_write_the_3x_document(fault):
    """A node with DCGM 3.x writes the 3.x document (it wrote the 4.x one with a 3.x version in it):
    NVIDIA's 3.3.9 schema holds, the nesting and the test names are the real 3.x run's."""
    import jsonschema

    from gpufleet.gates.parsers import dcgm
    v3 = dict(synth.DEFAULT_VERSIONS, dcgm="3.3.9")
    node = synth.NodeSpec(slot="n0", versions=v3, faults=frozenset({"dcgm_fail"} if fault else ()))
    doc = json.loads(synth.dcgm_diag(node, 2))
    jsonschema.validate(doc, json.loads(real("dcgm_diag_json_schema__dcgm3.3.9__NVIDIA_DCGM_testing.json")))
    real_doc = json.loads(real("dcgmi_diag_r3_j__1gpu_t4_dcgm3x__ms_virtualclient.json"))
    real_cats = {c["category"]: c for c in real_doc["DCGM GPU Diagnostic"]["test_categories"]}
    for cat in doc["DCGM GPU Diagnostic"]["test_categories"]:
        real_tests = {t["name"]: t for t in real_cats[cat["category"]]["tests"]}
        for test in cat["tests"]:
            assert test["name"] in real_tests
            real_keys = set(real_tests[test["name"]]["results"][0]) - {"info"}
            assert all(set(r) - {"warnings"} == real_keys for r in test["results"]), test["name"]
    diag = dcgm.parse_diag(json.dumps(doc))
    assert (diag.format, diag.version, diag.problems) == ("3.x-json", "3.3.9", ())
    assert {r.gpu for r in diag.results if r.test == "GPU Memory"} == set(range(8))
    failed = [r.gpu for r in diag.results if r.status == "Fail"]
    assert failed == ([3] if fault else [])
    assert json.loads(synth.dcgm_diag(synth.NodeSpec(slot="n0"), 2)).keys() == {"DCGM Diagnostic", "entity_groups",
                                                                                 "metadata"}


def test_the_gate_judges_the_3x_document_as_it_judges_the_4x_one():
    from gpufleet.gates import checks
    from gpufleet.gates.bundle import Bundle
    from gpufleet.gates.settings import GateSettings
    s = GateSettings(instance_type="p5.48xlarge")
    for dcgm_version in ("3.3.9", "4.2.3"):
        for faults, verdict in ((frozenset(), "PASS"), (frozenset({"dcgm_fail"}), "QUARANTINE")):
            spec = synth.NodeSpec(slot="n0", versions=dict(synth.DEFAULT_VERSIONS, dcgm=dcgm_version), faults=faults)
            files = synth.node_files(spec)
            results = checks.run_checks(Bundle(path="n0", manifest=synth.manifest(spec, files), files=files), s)[1]
            got = [r.verdict.value for r in results if r.check_id.startswith("dcgm")]
            assert got == [verdict], (dcgm_version, faults, got)


def test_query_gpu_csv_prints_as_the_real_driver_580_capture_of_the_same_fields(healthy):
    """The gates' own --query-gpu on a real H200 (driver 580): the header byte for byte (units in
    brackets), each cell in the real cell's format (`0 us`, `143771 MiB`, `78.37 W`, `0x...01`, the
    timestamp's milliseconds); the fabric cells differ on purpose (N/A on that one-GPU VM)."""
    files, _ = healthy
    real_lines = real("nvidia_smi_query_gpu_gates_fields__h200_drv580__captured.csv").splitlines()
    ours = files[B.QUERY_GPU].splitlines()
    assert ours[0] == real_lines[0] and len(ours) == 9
    fields = real_lines[0].split(", ")
    fmt = lambda cell: re.sub(r"\d+", "N", re.sub(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d", "BUS", cell))  # noqa: E731
    want = dict(zip(fields, real_lines[1].split(", ")))
    for row in ours[1:]:
        mine = dict(zip(fields, row.split(", ")))
        assert set(mine) == set(fields)
        for f in fields:
            if f in ("name", "fabric.state", "fabric.status"):
                continue
            assert fmt(mine[f]) == fmt(want[f]), (f, mine[f], want[f])
        assert (mine["fabric.state"], mine["fabric.status"]) == ("Completed", "Success")


def test_nvlink_s_lines_print_as_the_real_h100_capture(healthy):
    """`nvidia-smi nvlink -s` on a real H100 (driver 590): the GPU line, then a tab, a space and
    `Link N: 26.562 GB/s` per link; ours has the same lines for each of the 8 GPUs."""
    files, _ = healthy
    theirs = [x for x in real("nvidia_smi_nvlink_s__h100_drv590__nvidia_gpu_exporter_capture.txt").splitlines()
              if x and not x.startswith("#")]
    ours = files[B.NVLINK_S].splitlines()
    assert len(ours) == 8 * len(theirs)
    for g in range(8):
        block = ours[g * len(theirs):(g + 1) * len(theirs)]
        assert block[0] == theirs[0].replace("GPU 0:", f"GPU {g}:").replace("-00000000-", f"-{g:08d}-")
        assert block[1:] == theirs[1:]
