"""Every real capture in tests/fixtures/real reads to the values the file shows.

The H200 captures (driver 580.159.04, NCCL 2.28.9, a one-GPU VM) are outputs the parsers had
never seen when they were written: an empty `nvidia-smi nvlink -s`, ANSI escapes in `topo -m`,
N/A fabric fields. Values asserted here were read off the files by eye (see SOURCES.md).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from gpufleet.gates import baseline, bundle as B, xid
from gpufleet.gates.bundle import Bundle, Manifest
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.parsers import dcgm, efa, nccl_debug, nccl_tests, nvidia_smi
from gpufleet.gates.verdict import Verdict

from .conftest import REAL, read_real

H200_Q = "nvidia_smi_q__h200_1gpu_vm_drv580__captured.txt"
H200_CSV = "nvidia_smi_query_gpu_gates_fields__h200_drv580__captured.csv"
H200_REMAP = "nvidia_smi_remapped_rows__h200_drv580__captured.csv"
H200_TOPO = "nvidia_smi_topo_m__h200_1gpu_vm__captured.txt"
H200_NVLINK = "nvidia_smi_nvlink_s__h200_1gpu_vm_drv580__captured.txt"
H200_NCCL = "nccl_all_reduce_perf__1gpu_h200_nccl2.28.9_debug_info__captured.txt"
H200_HELP = "nvidia_smi_help_query_gpu__drv580__captured.txt"
H200_590_Q = "nvidia_smi_q__h200_1gpu_vm_drv590.48.01__nvidia_gpu_exporter_capture.txt"
H200_590_CSV = "nvidia_smi_query_gpu_full_csv__h200_1gpu_vm_drv590.48.01__nvidia_gpu_exporter_capture.csv"
DCGM_R3 = "dcgmi_diag_r3_j__1gpu_t4_dcgm3x__ms_virtualclient.json"
XID_CATALOG = "xid_catalog__derived_from_gpud_catalog_generated.csv"


def test_every_real_capture_is_read_by_a_test():
    """A capture nobody reads is dead weight; one that a test names but is absent fails that test."""
    tests = "".join(p.read_text() for p in Path(__file__).parents[1].rglob("test_*.py"))  # any suite may use one
    files = sorted(p.name for p in REAL.iterdir() if p.name != "SOURCES.md")
    assert files and [f for f in files if f not in tests] == []
    sources = (REAL / "SOURCES.md").read_text()
    assert [f for f in files if f not in sources] == []  # each one's origin and licence is written down


def test_h200_q_driver_580():
    q = nvidia_smi.parse_q(read_real(H200_Q))
    assert (q.driver_version, q.cuda_version, len(q.gpus)) == ("580.159.04", "13.0", 1)
    g = q.gpus[0]
    assert (g.product_name, g.bus_id, g.persistence_mode) == ("NVIDIA H200", "00000000:00:06.0", True)
    assert g.recovery_action == "None" and g.ecc_mode == (True, True) and g.volatile_uncorrectable == 0
    assert g.remapped == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False, "histogram_none": 0}
    assert g.pcie == {"gen_max": 5, "gen_current": 5, "gen_device_max": 5, "width_max": 16, "width_current": 16}
    assert g.fabric == (None, None)  # State/Status: N/A on a one-GPU VM


def test_h200_gates_fields_csv_driver_580():
    """Every field of the gates' --query-gpu list, as driver 580 answers it, in one GPU record."""
    table = nvidia_smi.read_query_table(read_real(H200_CSV))
    assert table.fields == tuple(B.QUERY_GPU_FIELDS.split(","))
    ev = NodeEvidence(Bundle(path="h200", manifest=Manifest(slot="h200"), files={B.QUERY_GPU: read_real(H200_CSV)}))
    g = ev.gpus[0]
    assert (g["name"], g["bus_id"], g["driver"]) == ("NVIDIA H200", "00000000:00:06.0", "580.159.04")
    assert (g["persistence"], g["mig"], g["ecc_current"], g["ecc_pending"]) == (True, False, True, True)
    assert (g["volatile_uncorrectable"], g["remap_uncorrectable"], g["remap_pending"], g["remap_failure"]) == (0, 0,
                                                                                                               False, False)
    assert (g["pcie_gen_current"], g["pcie_gen_max"], g["pcie_width_current"], g["pcie_width_max"]) == (5, 5, 16, 16)
    assert (g["clocks_active"], g["hw_thermal_us"], g["hw_power_brake_us"]) == (1, 0, 0)  # 0x..01 = Idle
    assert g["recovery_action"] == "None" and (g["fabric_state"], g["fabric_status"]) == (None, None)


def test_h200_remapped_rows_csv():
    res = nvidia_smi.parse_query_csv(read_real(H200_REMAP))
    assert res.rows == ({"gpu_bus_id": "00000000:00:06.0", "remapped_rows.correctable": "0",
                         "remapped_rows.uncorrectable": "0", "remapped_rows.pending": "No",
                         "remapped_rows.failure": "No"},)


def test_h200_topo_with_ansi_escapes():
    assert "\x1b[4m" in read_real(H200_TOPO)  # the capture really has them
    t = nvidia_smi.parse_topo(read_real(H200_TOPO))
    assert t.devices == ("GPU0",) and t.matrix == {"GPU0": {"GPU0": "X"}} and t.problems == ()


def test_h200_empty_nvlink_status_is_a_real_answer():
    assert read_real(H200_NVLINK) == ""
    st = nvidia_smi.parse_nvlink_status(read_real(H200_NVLINK))
    assert st.gpus == () and st.unparsed == () and st.problems == ()


def test_h200_nccl_228_one_rank_run():
    text = read_real(H200_NCCL)
    perf = nccl_tests.parse_text(text)
    assert len(perf.rows) == 1 and perf.problems == ()
    row = perf.rows[0]
    assert (row.size, row.count, row.dtype, row.redop, row.root) == (1073741824, 268435456, "float", "sum", -1)
    assert (row.out_of_place.time_us, row.out_of_place.algbw, row.out_of_place.busbw, row.out_of_place.wrong) == (
        507.95, 2113.9, 0.0, 0)
    assert (row.in_place.time_us, row.in_place.algbw, row.in_place.busbw) == (0.21, 5e6, 0.0)
    assert (perf.out_of_bounds, perf.out_of_bounds_ok, perf.avg_busbw, perf.wrong_total) == (0, True, 0.0, 0)
    net = nccl_debug.parse_net(text)
    assert (net.nccl_version, net.network, net.plugin_version, net.provider) == ("2.28.9", "Socket", None, None)
    assert net.socket_fallback and net.efa_absent is None
    r = baseline.check_efa_used(net)  # no net plugin, IB absent, Socket chosen: a true socket fallback
    assert (r.verdict, r.reason_code) == (Verdict.QUARANTINE, "efa-socket-fallback")


def test_driver_580_accepts_every_gates_query_field():
    accepted = set(re.findall(r'^"([\w.]+)"', read_real(H200_HELP), re.M))
    assert len(accepted) > 200
    assert [f for f in B.QUERY_GPU_FIELDS.split(",") if f not in accepted] == []
    assert [f for f in B.REMAPPED_ROWS_FIELDS.split(",") if f not in accepted and f != "gpu_bus_id"] == []


def test_h200_q_driver_590_fabric_completed():
    q = nvidia_smi.parse_q(read_real(H200_590_Q))
    assert (q.driver_version, len(q.gpus)) == ("590.48.01", 1)
    g = q.gpus[0]
    assert (g.product_name, g.bus_id, g.fabric, g.recovery_action) == ("NVIDIA H200", "00000000:83:00.0",
                                                                      ("Completed", "Success"), "None")


def test_h200_full_query_csv_driver_590():
    row = nvidia_smi.parse_query_csv(read_real(H200_590_CSV)).rows[0]
    assert {k: row[k] for k in ("name", "driver_version", "pci.bus_id", "fabric.state", "fabric.status",
                                "memory.total", "ecc.mode.current", "pcie.link.gen.max", "gpu_recovery_action")} == {
        "name": "NVIDIA H200", "driver_version": "590.48.01", "pci.bus_id": "00000000:83:00.0",
        "fabric.state": "Completed", "fabric.status": "Success", "memory.total": "143771",
        "ecc.mode.current": "Enabled", "pcie.link.gen.max": "5", "gpu_recovery_action": "None"}


def test_dcgm_3x_json_r3_names_its_gpu():
    d = dcgm.parse_diag(read_real(DCGM_R3))
    assert d.format == "3.x-json" and d.version is None and d.runtime_error is None
    assert len(d.tests) == 16 and len(d.results) == 16
    status = {r.test: r.status for r in d.results}
    assert status["EUD Test"] == "Skip" and {s for t, s in status.items() if t != "EUD Test"} == {"Pass"}
    per_gpu = {r.test: r.gpu for r in d.results if r.gpu is not None}  # "gpu_ids": "0" in the 3.x shape
    assert set(per_gpu.values()) == {0} and {"PCIe", "GPU Memory", "Diagnostic"} <= set(per_gpu)
    assert len(per_gpu) == json.dumps(json.loads(read_real(DCGM_R3))).count('"gpu_ids"') == 7


def test_xid_rules_use_nvidia_catalog_mnemonics():
    rows = {int(r["code"]): r for r in csv.DictReader(read_real(XID_CATALOG).splitlines())}
    assert len(rows) == 172
    names = {code: {n.strip() for n in row["mnemonic"].split("/") if n.strip()} for code, row in rows.items()}
    assert names[13] == {"ROBUST_CHANNEL_GR_EXCEPTION", "ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY"}  # one code, two names
    assert {code: rule.mnemonic for code, rule in xid.XID_RULES.items() if rule.mnemonic not in names[code]} == {}


def test_fi_info_no_efa_and_libfabric_empty_provider_line():
    fi = efa.parse_fi_info(read_real("fi_info_p_efa__no_efa_negative__aws_hpc_tutorials.txt"))
    assert fi.error_code == -61 and fi.devices == 0 and not fi.provider_ok
    line = "libfabric:53869:1772632639::core: core: fi_getinfo_():1391<warn> fi_getinfo: provider efa output empty list"
    assert efa.parse_fi_info(line + "\nfi_getinfo: -61\n").efa_absent == line
