"""Every parser against the real captures it applies to, and against our failure-shape fixtures."""

from __future__ import annotations

import json

import jsonschema
import pytest

from gpufleet.gates.parsers import dcgm, efa, kernel_log, nccl_debug, nccl_tests, nvidia_smi, system
from gpufleet.gates.parsers.dcgm import DcgmSeverity

from .conftest import OWN, REAL

# ------------------------------------------------------------------ nvidia-smi, real captures


def test_query_csv_real_h100(real):
    res = nvidia_smi.parse_query_csv(real("nvidia_smi_query_gpu_full__h100_drv590__nvidia_gpu_exporter_capture.csv"))
    assert res.problems == ()
    assert len(res.fields) == 212 and len(res.rows) == 1
    row = res.rows[0]
    assert row["name"] == "NVIDIA H100 80GB HBM3"
    assert row["driver_version"] == "590.48.01"
    assert row["memory.total"] == "81559"  # header unit [MiB] stripped, value unit stripped
    assert row["power.draw"] == "69.85"
    assert row["clocks_event_reasons.active"] == "0x0000000000000001"
    assert row["remapped_rows.pending"] == "No" and row["remapped_rows.failure"] == "No"
    assert row["retired_pages.double_bit.count"] is None  # [N/A]
    assert row["pcie.link.gen.max"] == "5" and row["pcie.link.width.current"] == "16"


def test_q_real_h100(real):
    q = nvidia_smi.parse_q(real("nvidia_smi_q__h100_1gpu_drv590__nvidia_gpu_exporter_capture.txt"))
    assert q.problems == ()
    assert (q.driver_version, q.cuda_version, q.attached_gpus) == ("590.48.01", "13.1", 1)
    g = q.gpus[0]
    assert g.bus_id == "00000000:00:09.0"
    assert g.product_name == "NVIDIA H100 80GB HBM3"
    assert g.persistence_mode is True
    assert g.ecc_mode == (True, True)
    assert g.volatile_uncorrectable == 0
    assert g.remapped == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False, "histogram_none": 0}
    assert g.pcie == {"gen_max": 5, "gen_current": 5, "gen_device_max": 5, "width_max": 16, "width_current": 16}
    reasons = g.clock_event_reasons
    assert reasons["Idle"] is True and reasons["HW Thermal Slowdown"] is False and reasons["HW Power Brake Slowdown"] is False
    assert g.recovery_action == "None"
    assert g.fabric == ("Completed", "Success")
    assert g.get("Retired Pages/Double Bit ECC") is None  # N/A on H100: row remapping instead


def test_healthy_synthetic_parses_like_the_real_capture(real):
    """The simulator/synth output must read to the same fields as the real H100 capture (DESIGN 10)."""
    from gpufleet.gates import synth
    from gpufleet.gates.checks import evidence

    real_q = nvidia_smi.parse_q(real("nvidia_smi_q__h100_1gpu_drv590__nvidia_gpu_exporter_capture.txt")).gpus[0]
    real_csv = nvidia_smi.parse_query_csv(
        real("nvidia_smi_query_gpu_full__h100_drv590__nvidia_gpu_exporter_capture.csv")).rows[0]
    node = synth.NodeSpec(slot="n0")
    syn_q = nvidia_smi.parse_q(synth.smi_q(node)).gpus[0]
    syn_csv = nvidia_smi.parse_query_csv(synth.query_gpu_csv(node)).rows[0]
    skip = {"driver", "bus_id", "hw_thermal_us", "hw_power_brake_us"}
    a = {k: v for k, v in evidence._from_csv(real_csv).items() if k not in skip}
    b = {k: v for k, v in evidence._from_csv(syn_csv).items() if k not in skip}
    assert a == b
    fa = {k: v for k, v in evidence._from_q(real_q).items() if k not in skip}
    fb = {k: v for k, v in evidence._from_q(syn_q).items() if k not in skip}
    assert fa == fb


@pytest.mark.parametrize("name, model, links, speed", [
    ("nvidia_smi_nvlink_s__h100_drv590__nvidia_gpu_exporter_capture.txt", "NVIDIA H100 80GB HBM3", 18, 26.562),
    ("nvidia_smi_nvlink_s__p4de_a100__aws_efa_cheatsheet.txt", "NVIDIA A100-SXM4-80GB", 12, 25.0),
])
def test_nvlink_real(real, name, model, links, speed):
    st = nvidia_smi.parse_nvlink_status(real(name))
    assert st.problems == ()
    assert len(st.gpus) == 1
    g = st.gpus[0]
    assert (g.index, g.name, g.active, g.inactive) == (0, model, links, ())
    assert set(g.links.values()) == {speed}


def test_nvlink_inactive_own(own):
    st = nvidia_smi.parse_nvlink_status(own("nvidia-smi-nvlink-s__inactive.txt"))
    assert len(st.gpus) == 8
    assert st.gpus[5].inactive == (3, 4) and st.gpus[5].active == 16
    assert all(g.active == 18 for g in st.gpus if g.index != 5)


def test_query_csv_own_failure_shapes(own):
    res = nvidia_smi.parse_query_csv(own("nvidia-smi-query-gpu__ecc_remap_failure.csv"))
    assert len(res.rows) == 8
    assert res.column("ecc.errors.uncorrected.volatile.total")[3] == "2"
    assert res.column("remapped_rows.failure") == ["No"] * 3 + ["Yes"] + ["No"] * 4
    assert res.rows[0]["memory.total"] == "81520"


def test_query_csv_tolerates_noheader_and_bad_rows():
    assert nvidia_smi.parse_query_csv("NVIDIA H100 80GB HBM3, 81559 MiB\n").problems
    res = nvidia_smi.parse_query_csv("name, memory.total [MiB]\nNVIDIA H100, 81559 MiB\nonly-one-field\nX, [GPU is lost]\n")
    assert [r["name"] for r in res.rows] == ["NVIDIA H100", "X"]
    assert any("1 values for 2 fields" in p for p in res.problems)
    assert any("GPU is lost" in p for p in res.problems)
    assert nvidia_smi.parse_query_csv("").problems == ("empty output",)


def test_remapped_rows_csv(own):
    res = nvidia_smi.parse_query_csv(own("remapped-rows__pending.csv"))
    assert res.column("remapped_rows.pending")[2] == "Yes"
    assert res.column("remapped_rows.uncorrectable")[2] == "1"


def test_topo_own(own):
    t = nvidia_smi.parse_topo(own("nvidia-smi-topo-m__p5.txt"))
    assert t.problems == ()
    assert t.devices == tuple(f"GPU{i}" for i in range(8))
    assert t.nvlinks_between("GPU0", "GPU7") == 18
    assert t.nvlinks_between("GPU3", "GPU3") is None
    assert nvidia_smi.parse_topo("garbage").problems


# ------------------------------------------------------------------ DCGM

def test_dcgm_json_v2style_real(real):
    ok = dcgm.parse_diag(real("dcgmi_diag_json_v2style__diag_pass_output__meta_gcm_test.json"))
    bad = dcgm.parse_diag(real("dcgmi_diag_json_v2style__diag_fail_output__meta_gcm_test.json"))
    assert ok.format == bad.format == "3.x-json"
    assert {r.status for r in ok.results} == {"Pass"}
    assert len(ok.results) == 9
    statuses = {r.test: r.status for r in bad.results}
    assert statuses["Persistence Mode"] == "Fail" and statuses["Environment Variables"] == "Warn"
    assert any("version" in p for p in bad.problems)  # no version: said so, not guessed silently


@pytest.mark.parametrize("name, version, driver, tests, n", [
    ("dcgmi_diag_r2_text__p4de_dcgm3.3.3__aws_efa_cheatsheet.txt", "3.3.3", "535.104.12", 11, 11),
    ("dcgmi_diag_r4_text__meta_gcm_docstring.txt", None, None, 18, 18),
])
def test_dcgm_text_real(real, name, version, driver, tests, n):
    d = dcgm.parse_diag(real(name))
    assert d.format == "text"
    assert (d.version, d.driver_version) == (version, driver)
    assert len(d.tests) == tests and len(d.results) == n
    assert {r.status for r in d.results} == {"Pass"}
    assert "PCIe" in d.tests and "GPU Memory" in d.tests
    assert next(r for r in d.results if r.test == "PCIe").category == "Integration"


def test_dcgm_text_fail_own(own):
    d = dcgm.parse_diag(own("dcgmi-diag__text_fail.txt"))
    pcie = [r for r in d.results if r.test == "PCIe"]
    assert [(r.gpu, r.status) for r in pcie] == [(2, "Fail"), (6, "Fail")]
    assert d.version == "3.3.9"
    assert pcie[-1].warnings[0].text.startswith("Warning: GPU 2")


def _schema(real_name: str) -> dict:
    return json.loads((REAL / real_name).read_text())


def _validate(doc: dict, schema_name: str) -> None:
    """Draft 4 for the 3.3.9 schema (as it declares), Draft 7 for the 4.x one ("schema#")."""
    cls = jsonschema.Draft4Validator if "3.3.9" in schema_name else jsonschema.Draft7Validator
    cls(_schema(schema_name)).validate(doc)


@pytest.mark.parametrize("fixture, schema", [
    ("dcgm-diag__4x_memory_fail_isolate.json", "dcgm_diag_json_schema__dcgm4.x__NVIDIA_DCGM_testing.json"),
    ("dcgm-diag__3x_pcie_fail_reset_339.json", "dcgm_diag_json_schema__dcgm3.3.9__NVIDIA_DCGM_testing.json"),
    ("dcgm-diag__3x_pcie_fail_isolate_326.json", "dcgm_diag_json_schema__dcgm3.3.9__NVIDIA_DCGM_testing.json"),
])
def test_own_dcgm_fixtures_valid_against_dcgm_schema(real, fixture, schema):
    doc = json.loads((OWN / fixture).read_text())
    _validate(doc, schema)
    # and the other generation's schema must reject it (the shapes really differ)
    other = ("dcgm_diag_json_schema__dcgm3.3.9__NVIDIA_DCGM_testing.json" if "4.x" in schema
             else "dcgm_diag_json_schema__dcgm4.x__NVIDIA_DCGM_testing.json")
    with pytest.raises(jsonschema.ValidationError):
        _validate(doc, other)


def test_synth_healthy_dcgm_valid_against_4x_schema(real):
    from gpufleet.gates import synth

    _validate(json.loads(synth.dcgm_diag_4x(synth.NodeSpec(slot="n"))),
              "dcgm_diag_json_schema__dcgm4.x__NVIDIA_DCGM_testing.json")


def test_dcgm_4x_isolate(own):
    d = dcgm.parse_diag(own("dcgm-diag__4x_memory_fail_isolate.json"))
    assert (d.format, d.version) == ("4.x-json", "4.1.1")
    fail = [r for r in d.results if r.status == "Fail"]
    assert [(r.test, r.gpu) for r in fail] == [("memory", 3)]
    assert fail[0].warnings[0].severity is DcgmSeverity.ISOLATE


def test_dcgm_severity_enum_by_version(own):
    new = dcgm.parse_diag(own("dcgm-diag__3x_pcie_fail_reset_339.json"))
    old = dcgm.parse_diag(own("dcgm-diag__3x_pcie_fail_isolate_326.json"))
    w_new = next(r for r in new.results if r.status == "Fail").warnings[0]
    w_old = next(r for r in old.results if r.status == "Fail").warnings[0]
    assert (w_new.severity_raw, w_new.severity) == (6, DcgmSeverity.RESET)
    assert (w_old.severity_raw, w_old.severity) == (1, DcgmSeverity.ISOLATE)
    assert dcgm.severity(1, "3.3.1") is DcgmSeverity.MONITOR
    assert dcgm.severity(1, "3.2.6") is DcgmSeverity.ISOLATE
    assert dcgm.severity(3, "4.2.0") is DcgmSeverity.UNKNOWN  # Google CHS's RESET=3 would be wrong
    assert dcgm.severity(2, "3.2.6") is DcgmSeverity.UNKNOWN


def test_dcgm_runtime_error_and_garbage():
    d = dcgm.parse_diag('Error: some text\n{"DCGM Diagnostic": {"version": "4.1.1", "runtime_error": "No GPUs"}}')
    assert d.runtime_error == "No GPUs"
    assert dcgm.parse_diag("{not json").problems
    assert dcgm.parse_diag('{"other": 1}').problems


# ------------------------------------------------------------------ kernel log

def test_kernel_log_real(real):
    log = kernel_log.parse_kernel_log(real("dmesg_xid_sxid_pcie_lines__imbue_doctests.log"))
    assert [(e.xid, e.pci) for e in log.xids] == [(94, "0000:0f:00"), (64, "0000:0f:00")]
    assert log.xids[0].timestamp == "2397166.983093"
    assert "All reserved rows for bank are remapped" in log.xids[1].text
    assert [(s.sxid, s.fatal, s.device) for s in log.sxids] == [(12028, False, "nvidia-nvswitch2")]
    assert log.pcie_limited[0].device == "mlx5_core 0000:9c:00.0"
    assert log.problems == ()


def test_kernel_log_own_journalctl_and_ctime(own):
    log = kernel_log.parse_kernel_log(own("kernel-log__xid79_sxid_fatal.txt"))
    assert [e.xid for e in log.xids] == [79, 74, 13]
    assert log.xids[0].timestamp == "2026-07-14T08:03:11+0000"
    assert log.xids[2].timestamp == "Tue Jul 14 08:03:13 2026"
    assert [(s.sxid, s.fatal) for s in log.sxids] == [(20034, True)]


def test_kernel_log_research_line_with_ctime_prefix():
    line = ("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, "
            "Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    log = kernel_log.parse_kernel_log(line)
    assert [(e.xid, e.pci) for e in log.xids] == [(119, "0000:9b:00")]


# ------------------------------------------------------------------ EFA

def test_fi_info_real_p4d(real):
    fi = efa.parse_fi_info(real("fi_info_p_efa_t_FI_EP_RDM__p4d_24xlarge__aws_ec2_user_guide.txt"))
    assert fi.devices == 4 and fi.provider_ok
    assert fi.efa_rdm_domains == ("efa_0", "efa_1", "efa_2", "efa_3")


def test_fi_info_real_no_efa(real):
    fi = efa.parse_fi_info(real("fi_info_p_efa__no_efa_negative__aws_hpc_tutorials.txt"))
    assert (fi.devices, fi.error_code, fi.provider_ok) == (0, -61, False)


def test_fi_info_libfabric2_dedup(own):
    fi = efa.parse_fi_info(own("fi_info-efa__libfabric2_p5en.txt"))
    assert fi.entries == 32  # efa + efa-direct per device
    assert fi.devices == 16 and fi.provider_ok


def test_fi_info_dgram_and_rxd_blocks_not_counted_as_rdm():
    text = ("provider: efa\n    fabric: EFA-fe80::e5\n    domain: efa_0-dgrm\n    version: 2.0\n    type: FI_EP_DGRAM\n"
            "provider: efa;ofi_rxd\n    fabric: EFA-fe80::e5\n    domain: efa_0-dgrm\n    type: FI_EP_RDM\n")
    fi = efa.parse_fi_info(text)
    assert fi.efa_rdm_domains == () and fi.efa_any_domains == ("efa_0",) and not fi.provider_ok


def test_lspci_counts_efa_not_ena():
    text = ("00:05.0 Ethernet controller: Amazon.com, Inc. Elastic Network Adapter (ENA)\n"
            "10:1c.0 Ethernet controller: Amazon.com, Inc. Elastic Fabric Adapter (EFA)\n"
            "11:1c.0 0200: 1d0f:efa1\n")
    assert efa.parse_lspci(text).efa_devices == 2


# ------------------------------------------------------------------ nccl-tests

def test_nccl_text_real_2x_p5(real):
    res = nccl_tests.parse_text(real("nccl_all_reduce_perf__2x_p5__aws_readme.txt"))
    assert res.problems == () and res.unparsed == ()
    assert len(res.rows) == 32
    last = res.rows[-1]
    assert last.size == 17179869184 and last.count == 4294967296 and last.dtype == "float"
    assert last.out_of_place.busbw == 487.09 and last.in_place.busbw == 487.26
    assert last.out_of_place.time_us == 66132
    assert res.rows[-2].out_of_place.busbw == 479.28
    assert next(r for r in res.rows if r.size == 2**31).out_of_place.busbw == 443.72
    assert res.wrong_total == 0
    assert res.avg_busbw is None and res.out_of_bounds is None  # the README block has no footer


def test_nccl_text_mpi_prefix_wrong_counts_footer(own):
    res = nccl_tests.parse_text(own("nccl-all-reduce__mpi_wrong_counts.txt"))
    assert [r.size for r in res.rows] == [2**30, 2**31, 2**32]
    assert res.rows[1].in_place.wrong == 512 and res.wrong_total == 512
    assert res.rows[1].out_of_place.time_us == 9197.5
    assert (res.out_of_bounds, res.out_of_bounds_ok) == (1, False)
    assert res.avg_busbw == 436.487


def test_nccl_text_na_wrong_v219(own):
    res = nccl_tests.parse_text(own("nccl-all-reduce__c0_na_v219.txt"))
    assert [r.out_of_place.wrong for r in res.rows] == [None, None]
    assert res.wrong_total is None
    assert res.rows[-1].out_of_place.busbw == 487.09
    assert (res.out_of_bounds, res.out_of_bounds_ok, res.avg_busbw) == (0, True, 483.145)


def test_nccl_text_old_error_column_and_extra_columns():
    text = ("#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
            "  1073741824     268435456     float     sum   4607.6  233.04  436.95  2e-07   4565.6  235.18  440.96  2e-07\n")
    res = nccl_tests.parse_text(text)
    assert res.rows[0].out_of_place.busbw == 436.95 and res.rows[0].out_of_place.error == 2e-07
    assert res.rows[0].root is None and res.rows[0].out_of_place.wrong is None


def test_nccl_json(own):
    res = nccl_tests.parse_json(own("nccl-all-reduce__j.json"))
    # nccl-tests 2.19 -J (format version 3, src/util.cu's shape): the real 2x p5 table's 8/16 GiB rows
    assert [r.out_of_place.busbw for r in res.rows] == [479.28, 487.09]
    assert [r.root for r in res.rows] == [-1, -1] and res.problems == ()  # root "    -1" (sprintf %6i)
    assert res.wrong_total == 0 and res.out_of_bounds == 0 and res.out_of_bounds_ok is True
    assert res.avg_busbw == 483.145
    assert nccl_tests.parse_json("not json").problems


# ------------------------------------------------------------------ NCCL_DEBUG lines

@pytest.mark.parametrize("line, network, provider, nics", [
    ("ip-1:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\nip-1:1:1 [0] NCCL INFO Using network AWS Libfabric",
     "AWS Libfabric", "efa", 4),
    ("0: node:2:2 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)\n"
     "0: node:2:2 [0] NCCL INFO Using network Libfabric", "Libfabric", "efa", 32),
    ("NCCL INFO Selected Provider is efa\nNCCL INFO Using network AWS Libfabric", "AWS Libfabric", "efa", None),
])
def test_nccl_debug_efa(line, network, provider, nics):
    net = nccl_debug.parse_net(line)
    assert (net.network, net.provider, net.nics, net.efa_used) == (network, provider, nics, True)


def test_nccl_debug_socket_fallback(own):
    net = nccl_debug.parse_net(own("nccl-debug__socket_fallback.txt"))
    assert net.socket_fallback and net.network == "Socket" and not net.efa_used
    assert net.nccl_version == "2.21.5"
    assert not nccl_debug.parse_net("ip:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>").efa_used


# ------------------------------------------------------------------ system probes

def test_lustre_and_smi_l_and_systemctl():
    assert system.parse_lustre_check("mount: /fsx 10.0.0.1@tcp:/x\nwritable: yes\n").writable is True
    lc = system.parse_lustre_check("mount: \nwritable: no\n")
    assert lc.mount is None and lc.writable is False
    assert system.parse_lustre_check("garbage").problems
    assert len(system.parse_nvidia_smi_l("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: X (UUID: GPU-2)\n").gpus) == 2
    assert system.parse_systemctl_is_active("\nfailed\n") == "failed"
    assert system.parse_systemctl_is_active("") is None
