"""Verdicts the field showed wrong (issue 19), each on a real capture where one exists.

Every test here failed before its fix: a healthy real EFA pair quarantined at its connection
set-up, libfabric's "1k" counts read as 1024, an unreadable output judged as hardware, a
nccl-tests 2.19 `-J` file crashing the gate, a beta plugin passing a release pin by prefix.
"""

from __future__ import annotations

import pytest

from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import Bundle, Manifest
from gpufleet.gates.parsers import fabtests
from gpufleet.gates.verdict import Verdict
from gpufleet.spec import AcceptanceConfig
from gpufleet import catalog

from .conftest import read_real

P5 = catalog.get("p5.48xlarge")
PINGPONG = "fi_pingpong_efa_test_sh__aws_cdi_sdk_install_guide.txt"


def _bundle(files: dict[str, str], slot: str = "n0") -> Bundle:
    return Bundle(path=f"/mem/{slot}", manifest=Manifest(slot=slot), files=dict(files))


def _latency(text: str, cfg: AcceptanceConfig = AcceptanceConfig()):
    f = A.pair_files("a", "b")
    return A._efa_latency(_bundle({f["pingpong"]: text}), "net.efa-latency[a--b]", f["pingpong"], cfg)


# --- item 2: fi_pingpong latency ------------------------------------------------------------

def test_the_real_efa_pair_passes_on_its_small_sizes_not_its_set_up_row():
    """efa_test.sh's real table: 1362 us at 64 B (10 iterations: the connection set-up), then
    19.90/17.40/18.85 us at 256 B-4 KiB. Judged from the least small-size row: 17.4 us."""
    r = _latency(read_real(PINGPONG))
    assert r.verdict is Verdict.PASS, r
    assert r.measured.startswith("17.4 usec/xfer at 1024 B (10 iterations)")


def test_a_slow_link_is_still_quarantined_on_its_small_sizes():
    text = read_real(PINGPONG).replace("19.90", "99.90").replace("17.40", "97.40").replace("18.85", "98.85")
    r = _latency(text)
    assert (r.verdict, r.reason_code) == (Verdict.QUARANTINE, "efa-latency-high") and "97.4" in r.message


def test_a_table_of_only_its_set_up_row_is_a_retest_not_a_quarantine():
    lines = read_real(PINGPONG).splitlines()
    only_first = "\n".join(lines[:4]) + "\n"  # banner, header, the 64 B row at 10 iterations
    r = _latency(only_first)
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "efa-latency-too-few-iterations")


def test_rows_with_too_few_iterations_are_not_judged():
    text = read_real(PINGPONG).replace("  10      =10  ", "  5       =5   ")
    assert [r.iterations for r in fabtests.parse_table(text).rows] == [5] * 6
    assert _latency(text).reason_code == "efa-latency-too-few-iterations"


@pytest.mark.parametrize("token,value", [("10", 10), ("1k", 1000), ("=10k", 10_000), ("2m", 2_000_000),
                                         ("1b", 10**9), ("1.2k", None), ("x", None)])
def test_counts_read_as_fabtests_cnt_str_prints_them(token, value):
    """fabtests common/shared.c cnt_str: k = 1000, m = 10^6, b = 10^9, truncated, no decimals."""
    assert fabtests.count_value(token) == value


def test_an_unreadable_count_is_a_parser_problem_and_a_retest():
    text = read_real(PINGPONG).replace("  10      =10  ", "  1.5k    =10  ", 1)
    assert fabtests.parse_table(text).problems
    r = _latency(text)
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "efa-test-unreadable")
    assert "unreadable / tool failed: retest" in r.message


def test_a_missing_fi_pingpong_is_tool_missing_not_a_link_failure():
    r = _latency("bash: line 1: fi_pingpong: command not found\n")
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "tool-missing-fi_pingpong")


# --- shared: one p5 node's bundle from real captures --------------------------------------

from gpufleet.gates import bundle as B  # noqa: E402
from gpufleet.gates.checks import run_checks  # noqa: E402
from gpufleet.gates.checks.evidence import NodeEvidence  # noqa: E402
from gpufleet.gates.checks.fabric import check_fabric_manager  # noqa: E402
from gpufleet.gates.checks.gpu import check_gpu_count  # noqa: E402
from gpufleet.gates.checks.kernel_log import check_kernel_log  # noqa: E402
from gpufleet.gates.checks.readable import check_readable  # noqa: E402
from gpufleet.gates.parsers import kernel_log, nccl_tests, nvidia_smi  # noqa: E402
from gpufleet.gates.settings import GateSettings  # noqa: E402
from gpufleet.gates.verdict import node_outcome  # noqa: E402

H100_Q = "nvidia_smi_q__h100_1gpu_drv590__nvidia_gpu_exporter_capture.txt"
H200_Q_580 = "nvidia_smi_q__h200_1gpu_vm_drv580__captured.txt"
H200_CSV = "nvidia_smi_query_gpu_gates_fields__h200_drv580__captured.csv"
DMESG = "dmesg_xid_sxid_pcie_lines__imbue_doctests.log"
P5S = GateSettings(instance_type="p5.48xlarge")
P5EN = GateSettings(instance_type="p5en.48xlarge")


def _ev(files: dict[str, str]) -> NodeEvidence:
    return NodeEvidence(_bundle(files))


def _codes(results) -> list[str | None]:
    return [r.reason_code for r in results]


# --- item 1: NVLink fabric health -----------------------------------------------------------

def _health(q: str, **values: str) -> str:
    """The real driver 590 H100 -q with its Fabric > Health lines set to `values` (N/A as captured)."""
    labels = {"summary": "Summary", "bandwidth": "Bandwidth", "route_recovery": "Route Recovery in progress",
              "route_unhealthy": "Route Unhealthy", "access_timeout": "Access Timeout Recovery",
              "incorrect_configuration": "Incorrect Configuration"}
    out = []
    for line in q.splitlines():
        for key, label in labels.items():
            if line.strip().startswith(label + " ") and key in values:
                line = line.split(":", 1)[0] + ": " + values[key]
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_real_h100_fabric_completed_with_health_na_passes_and_says_health_was_not_reported():
    res = check_fabric_manager(_ev({B.FABRICMANAGER: "active\n", B.SMI_Q: read_real(H100_Q)}), P5S)
    assert all(r.verdict is Verdict.PASS for r in res), res
    assert any("not reported" in r.message for r in res)


@pytest.mark.parametrize("values,code,verdict", [
    ({"summary": "Unhealthy", "route_unhealthy": "True"}, "fabric-route-unhealthy", Verdict.QUARANTINE),
    ({"summary": "Limited Capacity", "bandwidth": "Degraded"}, "fabric-bandwidth-degraded", Verdict.QUARANTINE),
    ({"summary": "Unhealthy", "route_recovery": "True"}, "fabric-route-recovery", Verdict.REMEDIATE),
    ({"summary": "Unhealthy", "access_timeout": "True"}, "fabric-access-timeout-recovery", Verdict.REMEDIATE),
    ({"summary": "Unhealthy", "incorrect_configuration": "Insufficient NVLinks"}, "fabric-incorrect-configuration",
     Verdict.QUARANTINE),
    ({"summary": "Unhealthy"}, "fabric-health-unhealthy", Verdict.REMEDIATE),
])
def test_a_registered_gpu_with_unhealthy_fabric_is_not_admitted_with_a_code_per_field(values, code, verdict):
    q = _health(read_real(H100_Q), **{"bandwidth": "Full", "route_recovery": "False", "route_unhealthy": "False",
                                      "access_timeout": "False", "incorrect_configuration": "None",
                                      "summary": "Healthy", **values})
    res = check_fabric_manager(_ev({B.FABRICMANAGER: "active\n", B.SMI_Q: q}), P5S)
    bad = [r for r in res if r.verdict is not Verdict.PASS]
    assert [(r.reason_code, r.verdict) for r in bad] == [(code, verdict)]


def test_a_healthy_fabric_passes_as_healthy():
    q = _health(read_real(H100_Q), summary="Healthy", bandwidth="Full", route_recovery="False",
                route_unhealthy="False", access_timeout="False", incorrect_configuration="None")
    res = check_fabric_manager(_ev({B.FABRICMANAGER: "active\n", B.SMI_Q: q}), P5S)
    assert all(r.verdict is Verdict.PASS for r in res) and res[-1].measured == "healthy"


def test_fabric_state_na_on_an_nvswitch_hopper_is_a_finding_not_a_silent_pass():
    """The real driver 580 H200 -q: State/Status N/A (a one-GPU VM). On p5en, an NVSwitch H200
    system, that leaves the registration unproven. A100 (p4d) has no GPU fabric registration."""
    ev = _ev({B.FABRICMANAGER: "active\n", B.SMI_Q: read_real(H200_Q_580)})
    assert "fabric-state-na" in _codes(check_fabric_manager(ev, P5EN))
    p4d = GateSettings(instance_type="p4d.24xlarge")
    assert all(r.verdict is Verdict.PASS for r in check_fabric_manager(ev, p4d))


def test_fabric_in_progress_and_insufficient_resources_is_not_ready():
    q = read_real(H100_Q).replace("State                                          : Completed",
                                  "State                                          : In Progress")
    q = q.replace("Status                                         : Success",
                  "Status                                         : Insufficient Resources", 1)
    res = check_fabric_manager(_ev({B.FABRICMANAGER: "active\n", B.SMI_Q: q}), P5S)
    assert "fabric-not-ready" in _codes(res)


def _fabric_csv(bus: str, state: str, status: str, summary: str = "N/A") -> str:
    header = B.FABRIC_QUERY_FIELDS.replace(",", ", ")
    cells = [bus, state, status, "0", "00000000-0000-0000-0000-000000000000", summary] + ["N/A"] * 5
    return header + "\n" + ", ".join(cells) + "\n"


def test_fabric_csv_and_q_disagreeing_is_said_not_silently_resolved():
    """The fabric CSV (FABRIC_QUERY_FIELDS; values as the real 590 -q shows them) says In Progress
    for the GPU the real -q shows Completed: reported, neither source wins."""
    csv_text = _fabric_csv("00000000:00:09.0", "In Progress", "N/A")
    res = check_fabric_manager(_ev({B.FABRICMANAGER: "active\n", B.SMI_Q: read_real(H100_Q),
                                    B.FABRIC_QUERY: csv_text}), P5S)
    assert "fabric-sources-disagree" in _codes(res)
    agree = _fabric_csv("00000000:00:09.0", "Completed", "Success")
    res = check_fabric_manager(_ev({B.FABRICMANAGER: "active\n", B.SMI_Q: read_real(H100_Q),
                                    B.FABRIC_QUERY: agree}), P5S)
    assert all(r.verdict is Verdict.PASS for r in res), res


def test_an_unknown_fabric_value_is_unreadable_not_a_verdict():
    q = _health(read_real(H100_Q), summary="Mostly Fine")
    res = check_fabric_manager(_ev({B.FABRICMANAGER: "active\n", B.SMI_Q: q}), P5S)
    assert [(r.verdict, r.reason_code) for r in res if r.verdict is not Verdict.PASS] == [
        (Verdict.REMEDIATE, "unreadable-nvidia-smi-q")]


def test_the_fabric_fields_are_ones_driver_580_accepts():
    import re
    accepted = set(re.findall(r'^"([\w.]+)"', read_real("nvidia_smi_help_query_gpu__drv580__captured.txt"), re.M))
    assert [f for f in B.FABRIC_QUERY_FIELDS.split(",") if f not in accepted] == []
    assert set(nvidia_smi.FABRIC_CSV_FIELDS) <= accepted


# --- item 3: unreadable is not broken -------------------------------------------------------

def test_a_garbled_query_csv_is_unreadable_not_zero_gpus():
    """A `-q -x` XML document where the CSV was expected, or random bytes: no GPU verdict, a retest."""
    import random
    rnd = random.Random(19)
    garbage = "".join(chr(rnd.randrange(32, 127)) for _ in range(400))
    xml = '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
    for text in (xml, garbage, ""):
        ev = _ev({B.QUERY_GPU: text})
        count = check_gpu_count(ev, P5S)
        assert [(r.verdict, r.reason_code) for r in count] == [(Verdict.REMEDIATE, "unreadable-nvidia-smi-query-gpu")]
        assert "unreadable / tool failed: retest" in count[0].message


def test_a_truncated_real_q_with_no_csv_is_unreadable_not_a_gpu_verdict():
    cut = read_real(H100_Q)[:200]  # the banner and timestamp: no GPU section
    ev = _ev({B.SMI_Q: cut})
    assert [r.reason_code for r in check_gpu_count(ev, P5S)] == ["unreadable-nvidia-smi-q"]


def test_a_csv_row_cut_short_is_unreadable_not_a_missing_gpu():
    lines = read_real(H200_CSV).splitlines()
    cut = "\n".join(lines + [lines[1][:40]]) + "\n"  # a second GPU row cut mid-line
    ev = _ev({B.QUERY_GPU: cut})
    assert check_gpu_count(ev, P5S)[0].reason_code == "unreadable-nvidia-smi-query-gpu"


@pytest.mark.parametrize("text,rc", [("", 0), ("-- No entries --\n", 0), ("", 1)])
def test_an_empty_or_failed_kernel_log_is_unreadable(text, rc):
    from gpufleet.gates.bundle import FileRecord
    b = Bundle(path="/mem/n0", manifest=Manifest(slot="n0", files={B.KERNEL_LOG: FileRecord(
        command="journalctl -k -b -o short-iso --no-pager || dmesg -T", exit_code=rc)}), files={B.KERNEL_LOG: text})
    res = check_readable(NodeEvidence(b), P5S)
    assert [r.reason_code for r in res] == ["unreadable-kernel-log"]


def test_a_mig_form_xid_line_is_read_and_judged():
    line = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 48, pid=4242, name=python3, Ch 00000008\n"
    log = kernel_log.parse_kernel_log(read_real(DMESG) + line)
    assert log.problems == ()
    assert [(e.xid, e.pci, e.gpu_instance) for e in log.xids][-1] == (48, "0000:3b:00", 5)
    res = check_kernel_log(_ev({B.KERNEL_LOG: read_real(DMESG) + line}), P5S)
    assert (res[0].verdict, res[0].reason_code) == (Verdict.QUARANTINE, "xid-48")


def test_an_unrecognised_xid_like_line_reaches_a_retest():
    line = "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00 SOMETHING-NEW:1): 43, pid=1\n"
    ev = _ev({B.KERNEL_LOG: read_real(DMESG) + line})
    assert "unreadable-kernel-log" in _codes(check_readable(ev, P5S))


def test_unreadable_outputs_retest_once_and_never_pass():
    """The node's outcome: REMEDIATE (retest), a second unreadable attempt quarantines."""
    ev_files = {B.QUERY_GPU: "<nvidia_smi_log>\n"}
    _, results = run_checks(_bundle(ev_files), P5S)
    first = node_outcome(results)
    assert first.verdict is Verdict.REMEDIATE and first.action.value == "retest"
    assert "unreadable-nvidia-smi-query-gpu" in first.reason_codes
    assert node_outcome(results, first).action.value == "quarantine"


# --- item 4: nccl-tests -J, format version 3 ------------------------------------------------

J = "nccl-all-reduce__j.json"


def _j() -> dict:
    import json
    from .conftest import OWN
    return json.loads((OWN / J).read_text())


def _dump(doc: dict) -> str:
    import json
    return json.dumps(doc, separators=(",", ":"))


def test_the_v3_document_reads_strictly():
    res = nccl_tests.parse_json(_dump(_j()))
    assert res.problems == () and [r.size for r in res.rows] == [8589934592, 17179869184]
    assert res.out_of_bounds_ok is True and res.wrong_total == 0


@pytest.mark.parametrize("path,value", [
    (("average_bus_bandwidth", "okay"), "true"), (("average_bus_bandwidth", "okay"), "false"),
    (("average_bus_bandwidth", "okay"), "unchecked"), (("out_of_bounds", "okay"), "false"),
])
def test_the_writers_flag_strings_are_read(path, value):
    doc = _j()
    doc[path[0]][path[1]] = value
    res = nccl_tests.parse_json(_dump(doc))
    assert res.problems == ()
    if path[0] == "out_of_bounds":
        assert res.out_of_bounds_ok is False


def test_nwrong_null_is_an_unchecked_run_and_a_float_count_is_read():
    doc = _j()
    for r in doc["results"]:
        r["out_of_place"]["nwrong"] = r["in_place"]["nwrong"] = None
    assert nccl_tests.parse_json(_dump(doc)).wrong_total is None
    doc["results"][0]["out_of_place"]["nwrong"] = 3.0
    assert nccl_tests.parse_json(_dump(doc)).wrong_total == 3


@pytest.mark.parametrize("mutate", [
    lambda d: d["results"][0].__setitem__("root", -1.5),
    lambda d: d["results"][0].__setitem__("root", "root"),
    lambda d: d["results"][0]["out_of_place"].__setitem__("nwrong", "0"),
    lambda d: d["results"][0]["out_of_place"].__setitem__("nwrong", 0.5),
    lambda d: d["results"][0]["out_of_place"].__setitem__("bus_bw", "479.28"),
    lambda d: d["results"][0].__setitem__("size", "8G"),
    lambda d: d["out_of_bounds"].__setitem__("okay", True),
    lambda d: d["average_bus_bandwidth"].__setitem__("okay", "maybe"),
    lambda d: d.__setitem__("version", 4),
    lambda d: d.__setitem__("results", {"size": 1}),
    lambda d: d["config"].__setitem__("devices", "8"),
    lambda d: d["results"].append([1, 2]),
])
def test_a_value_of_an_unknown_shape_is_a_problem_never_an_exception(mutate):
    doc = _j()
    mutate(doc)
    res = nccl_tests.parse_json(_dump(doc))
    assert res.problems


@pytest.mark.parametrize("text", ["[]", "null", "1", '{"results": null}', '"x"', "{" * 5000])
def test_documents_that_are_not_a_v3_object_are_problems(text):
    assert nccl_tests.parse_json(text).problems


def test_an_unreadable_json_row_makes_the_intra_check_a_retest():
    doc = _j()
    doc["results"][0]["out_of_place"]["nwrong"] = "N/A"
    ev = _ev({B.NCCL_INTRA_JSON: _dump(doc), B.NCCL_INTRA: read_real("nccl_all_reduce_perf__2x_p5__aws_readme.txt")})
    assert "unreadable-nccl-all-reduce-intra" in _codes(check_readable(ev, P5S))


def test_an_unreadable_link_value_is_a_retest_not_a_link_down():
    from gpufleet.gates.checks.fabric import check_nvlink
    text = read_real("nvidia_smi_nvlink_s__h100_drv590__nvidia_gpu_exporter_capture.txt")
    first_link = next(ln for ln in text.splitlines() if "Link 0:" in ln)
    garbled = text.replace(first_link, first_link.split(":")[0] + ": <garbled>", 1)
    res = check_nvlink(_ev({B.NVLINK_S: garbled}), P5S)
    assert [(r.verdict, r.reason_code) for r in res] == [(Verdict.REMEDIATE, "unreadable-nvidia-smi-nvlink-s")]


def test_an_efa_block_without_a_domain_is_a_retest_not_efa_missing():
    from gpufleet.gates.checks.efa_nccl import check_efa
    text = read_real("fi_info_p_efa_t_FI_EP_RDM__p4d_24xlarge__aws_ec2_user_guide.txt")
    dom = next(ln for ln in text.splitlines() if "domain:" in ln)
    res = check_efa(_ev({B.FI_INFO: text.replace(dom + "\n", "", 1)}), GateSettings(instance_type="p4d.24xlarge"))
    assert {(r.check_id, r.reason_code) for r in res} == {("efa.count", "unreadable-fi_info-efa"),
                                                           ("efa.provider", "unreadable-fi_info-efa")}


# --- item 5: versions as versions, NIC counts, partial DCGM documents ----------------------

from gpufleet.gates import versions  # noqa: E402
from gpufleet.gates.checks.efa_nccl import check_nccl_net  # noqa: E402
from gpufleet.gates.parsers import dcgm  # noqa: E402


@pytest.mark.parametrize("printed,ok", [("1.16.0", True), ("1.16.0-aws", True), ("v1.16.0", True),
                                        ("1.16.0-beta", False), ("1.16.0rc1", False), ("1.16.0.1", False),
                                        ("1.16.3", False)])
def test_a_beta_plugin_is_skew_against_a_release_pin(printed, ok):
    """aws-ofi-nccl's init line as the plugin prints it (versions.BY_KEY example shape)."""
    found = versions.read_version("aws_ofi_nccl", f"NET/OFI Initializing aws-ofi-nccl {printed}")
    assert found is not None and versions.matches("aws_ofi_nccl", "1.16.0", found) is ok


def test_a_distribution_build_tag_still_matches_a_prefix_pin():
    assert versions.matches("kubelet", "1.33.4", "v1.33.4-eks-e386d34")
    assert not versions.matches("kubelet", "1.33.4", "v1.33.4-rc.0")


NICS_16 = "nccl_debug_ofi_found_16_nics__p5en_8xh200__nvidia_nccl_issue1597.txt"


def test_sixteen_nics_pass_on_a_p5en_and_are_a_finding_on_a_32_efa_p5():
    """The real p5en-class log (NVIDIA/nccl#1597): aws-ofi-nccl found 16 NICs, every EFA device of a
    p5en; the same log on a p5 (32 EFA devices) means the plugin uses half the fabric."""
    ev = _ev({B.NCCL_EFA_LOOPBACK: read_real(NICS_16)})
    found = {r.check_id: r.verdict for r in check_nccl_net(ev, GateSettings(instance_type="p5en.48xlarge"))}
    assert (found["efa.nccl_net"], found["efa.nccl_nics"]) == (Verdict.PASS, Verdict.PASS)
    res = check_nccl_net(ev, P5S)
    assert [(r.check_id, r.verdict, r.reason_code) for r in res][1] == ("efa.nccl_nics", Verdict.REMEDIATE,
                                                                        "nccl-nics-short")


def test_a_dcgm_4x_fragment_says_the_document_is_partial():
    import json
    from .conftest import OWN
    doc = json.loads((OWN / "dcgm-diag__4x_memory_fail_isolate.json").read_text())
    body_only = json.dumps(doc["DCGM Diagnostic"])  # test_categories without the document around them
    diag = dcgm.parse_diag(body_only)
    assert diag.problems and diag.problems[0].startswith("partial DCGM 4.x document")
    cut = json.dumps(doc)[:300]  # cut off mid-document
    assert dcgm.parse_diag(cut).problems[0].startswith("partial DCGM 4.x document: cut off")
    no_meta = dict(doc)
    no_meta.pop("metadata")
    assert any(p.startswith("partial DCGM 4.x document: no 'metadata'") for p in
               dcgm.parse_diag(json.dumps(no_meta)).problems)


@pytest.mark.parametrize("text", ['{"DCGM Diagnostic": {"test_categories": [1, 2]}}',
                                  '{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"results": "x"}]}]}}',
                                  "[1, 2]"])
def test_dcgm_json_of_an_unknown_shape_is_a_problem_not_an_exception(text):
    assert dcgm.parse_diag(text).problems


# --- item 6: multi-node floors follow the measured curve ------------------------------------

def test_p5_floors_follow_the_published_curve_per_node_count():
    """crazyguitar/aws-gpu-communication-benchmark, p5 over EFA at 8 GiB: 2 nodes 477.7 (default
    algorithm: tree/NVLS beats the NIC rate), 4 357.0, 8 355.4, 16 356.3, 32 321.1 GB/s; floor 0.9 x."""
    from gpufleet.gates.settings import GIB
    s = P5S
    at8 = [s.busbw_floor(n, ring=False, message_bytes=8 * GIB) for n in (2, 4, 8, 16, 32, 64)]
    assert at8 == [429.9, 321.3, 319.9, 320.7, 289.0, 289.0]
    assert s.busbw_floor(2, message_bytes=8 * GIB) == 321.3  # a Ring pair is bounded by the 4-node ring figure
    assert s.busbw_floor(24, message_bytes=8 * GIB) == 289.0  # between 16 and 32: the lower
    # the gates' runs are 4 GiB: the curve measured at 1 GiB (not above the run's size) bounds them
    assert s.busbw_floor(4) == 252.0 and "1 GiB" in s.busbw_floor_source(4)
    assert "crazyguitar" in s.busbw_floor_source(32, message_bytes=8 * GIB)


def test_types_without_a_published_curve_keep_the_catalog_floor_with_its_source():
    s = GateSettings(instance_type="p5en.48xlarge")
    assert s.busbw_floor(2) == s.busbw_floor(32) == 330.0 and "no published curve" in s.busbw_floor_source(8)
    assert GateSettings(multi_node_busbw_floor_gbs=300.0).busbw_floor(32) == 300.0  # the stack's own floor wins


@pytest.mark.parametrize("name", [H100_Q, H200_Q_580, "nvidia_smi_q__h200_1gpu_vm_drv590.48.01__nvidia_gpu_exporter_capture.txt"])
def test_the_fabric_scan_reads_what_the_full_q_parser_reads(name):
    """q_fabric (the fabric check's cheap scan) against parse_q on real captures, whole, with two
    GPU sections, with Health faults, and cut off mid-document."""
    text = read_real(name)
    two = text + "\n" + text[text.index("\nGPU ") + 1:]
    faulty = _health(text, summary="Unhealthy", route_unhealthy="True")
    for t in (text, two, faulty, text[:len(text) // 2], text[:text.index("Health")]):
        full = [(g.bus_id, {k: v for k, v in g.values.items() if k.startswith("Fabric/")})
                for g in nvidia_smi.parse_q(t).gpus]
        assert nvidia_smi.q_fabric(t) == full
        doc = [p for p in nvidia_smi.parse_q(t).problems if p.startswith(("no GPU", "Attached"))]
        assert list(nvidia_smi.q_problems(t)) == doc


# --- acceptance tools: an unreadable output is a retest, a real failure keeps its verdict -----

IPERF_REFUSED = "iperf3_J_connection_refused__iperf3.12__captured.json"
IPERF_OK = "iperf3_J_tcp_loopback__iperf3.12__captured.json"
FIO_RAND = "fio_randread_4k_json__fio3.33__captured.json"


def _net_check(kind: str, text: str):
    f = A.pair_files("a", "b")
    b = _bundle({f[kind]: text})
    fn = {"iperf3": A._tcp, "ping": A._ping}[kind]
    return fn(b, f"net.{kind}[a--b]", f[kind], P5, AcceptanceConfig()) if kind == "iperf3" else \
        fn(b, f"net.{kind}[a--b]", f[kind], AcceptanceConfig())


@pytest.mark.parametrize("text", [read_real(IPERF_OK)[:300], "[1, 2]", '{"end": []}', "\x00\x01garbage"])
def test_an_unreadable_iperf3_document_is_a_retest(text):
    r = _net_check("iperf3", text)
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "iperf3-unreadable")


def test_iperf3s_own_error_is_still_a_link_failure():
    r = _net_check("iperf3", read_real(IPERF_REFUSED))
    assert (r.verdict, r.reason_code) == (Verdict.QUARANTINE, "mgmt-link-down")


def test_garbled_ping_output_is_a_retest_but_pings_own_error_is_not():
    assert _net_check("ping", "PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n64 bytes fr").reason_code == \
        "ping-unreadable"
    assert _net_check("ping", "ping: connect: Network is unreachable\n").reason_code == "mgmt-link-down"


@pytest.mark.parametrize("text", [read_real(FIO_RAND)[:500], '{"jobs": [{"jobname": "x", "error": "EIO"}]}', "[]"])
def test_an_unreadable_fio_document_is_a_retest(text):
    r = A._fio(_bundle({A.FIO_RAND_READ: text}), "storage.random-read", A.FIO_RAND_READ, "x")
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "fio-unreadable")


def test_the_gate_command_reads_a_v3_json_with_unchecked_and_garbage_without_crashing(tmp_path):
    """Before: `"okay": "unchecked"` / a "%6i" root made `gpufleet gate` end with exit 1 (a crash)."""
    import json
    from click.testing import CliRunner
    from gpufleet.cli import main
    from gpufleet.gates import synth
    from .conftest import OWN
    d = tmp_path / "bundles"
    for slot, text in (("v3", (OWN / J).read_text()), ("garbled", (OWN / J).read_text()[:700])):
        synth.write_node(d / slot, synth.NodeSpec(slot=slot))
        (d / slot / B.NCCL_INTRA_JSON).write_text(text)
    r = CliRunner().invoke(main, ["gate", str(d), "--json"])
    assert r.exit_code in (0, 3) and r.exception is None or isinstance(r.exception, SystemExit), r.output
    records = {x["slot"]: x for x in json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"]}
    v3 = {c["check_id"]: c for c in records["v3"]["checks"]}
    assert v3["nccl.intra.correctness"]["verdict"] == "PASS" and v3["nccl.intra.busbw"]["measured"] == "487.09 GB/s"
    garbled = {c["check_id"]: c for c in records["garbled"]["checks"]}
    assert garbled["nccl.intra.busbw"]["verdict"] == "PASS"  # the cut -J has no rows: the text table is judged
    cut = garbled[f"readable.{B.NCCL_INTRA_JSON}"]  # and the -J that does not read is said, not dropped
    assert (cut["verdict"], cut["reason_code"]) == ("REMEDIATE", "unreadable-nccl-all-reduce-intra")
    assert f"readable.{B.NCCL_INTRA_JSON}" not in v3 and f"readable.{B.NCCL_INTRA}" not in v3


def test_a_j_file_the_collector_could_not_write_is_not_a_problem():
    """nccl-tests < 2.17.3 has no -J: the collector leaves its one-line note and exit 3; the text is judged."""
    from gpufleet.gates.bundle import FileRecord
    note = "no -J output: this all_reduce_perf has no --output_file (nccl-tests < 2.17.3) or the run wrote none\n"
    files = {B.NCCL_INTRA: read_real("nccl_all_reduce_perf__2x_p5__aws_readme.txt"), B.NCCL_INTRA_JSON: note}
    records = {B.NCCL_INTRA_JSON: FileRecord(command="cat .nccl-all-reduce-intra.json", exit_code=3)}
    ev = NodeEvidence(Bundle(path="/mem/n0", manifest=Manifest(slot="n0", files=records), files=files))
    assert [c.check_id for c in check_readable(ev, P5S) if c.check_id.startswith("readable.nccl")] == []


# --- lspci: an empty or failed listing is not "0 EFA devices" ---------------------------------

FI_P4D = "fi_info_p_efa_t_FI_EP_RDM__p4d_24xlarge__aws_ec2_user_guide.txt"  # 4 EFA domains (real)
P4D = GateSettings(instance_type="p4d.24xlarge")


@pytest.mark.parametrize("text,rc", [
    ("", 0),  # nothing at all: any Nitro instance lists at least its ENA and EBS controller
    ("pcilib: Cannot open /sys/bus/pci/devices\nlspci: Cannot find any working access method.\n", 1),
    ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n', 0),
])
def test_an_empty_or_failed_lspci_is_a_retest_not_efa_missing(text, rc):
    """Before: efa.count took the minimum of fi_info's 4 and lspci's 0 and quarantined (efa-missing)."""
    from gpufleet.gates.bundle import FileRecord
    from gpufleet.gates.checks.efa_nccl import check_efa

    def ev(files):
        records = {B.LSPCI_EFA: FileRecord(command="lspci -d 1d0f:", exit_code=rc)}
        return NodeEvidence(Bundle(path="/mem/n0", manifest=Manifest(slot="n0", files=records), files=files))

    with_fi = ev({B.FI_INFO: read_real(FI_P4D), B.LSPCI_EFA: text})
    count = next(r for r in check_efa(with_fi, P4D) if r.check_id == "efa.count")
    assert count.verdict is Verdict.PASS and count.measured == "{'fi_info': 4}"  # judged on what reads
    assert "unreadable-lspci-efa" in _codes(check_readable(with_fi, P4D))  # and the node retests
    alone = check_efa(ev({B.LSPCI_EFA: text}), P4D)
    assert [(r.check_id, r.verdict, r.reason_code) for r in alone][0] == \
        ("efa.count", Verdict.REMEDIATE, "unreadable-lspci-efa")


def test_a_real_shaped_lspci_without_efa_is_still_efa_missing():
    """The listing reads (the ENA and EBS controller are there), so no EFA line is a finding."""
    from gpufleet.gates.checks.efa_nccl import check_efa
    text = ("00:04.0 Non-Volatile memory controller: Amazon.com, Inc. NVMe EBS Controller\n"
            "00:05.0 Ethernet controller: Amazon.com, Inc. Elastic Network Adapter (ENA)\n")
    res = check_efa(_ev({B.LSPCI_EFA: text}), P4D)
    assert (res[0].verdict, res[0].reason_code) == (Verdict.QUARANTINE, "efa-missing")
    assert "unreadable-lspci-efa" not in _codes(check_readable(_ev({B.LSPCI_EFA: text}), P4D))


def test_an_xml_q_where_the_text_q_was_expected_is_unreadable_not_zero_gpus():
    """`nvidia-smi -q -x` (the nvsmi_device DTD's document) in nvidia-smi-q.txt: no GPU verdict, a retest."""
    xml = ('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
           "\t<driver_version>580.159.04</driver_version>\n\t<attached_gpus>8</attached_gpus>\n"
           '\t<gpu id="00000000:53:00.0">\n\t\t<product_name>NVIDIA H100 80GB HBM3</product_name>\n\t</gpu>\n'
           "</nvidia_smi_log>\n")
    ev = _ev({B.SMI_Q: xml})
    assert [(r.verdict, r.reason_code) for r in check_gpu_count(ev, P5S)] == \
        [(Verdict.REMEDIATE, "unreadable-nvidia-smi-q")]
    assert "unreadable-nvidia-smi-q" in _codes(check_readable(ev, P5S))


@pytest.mark.parametrize("text", ["", "timeout: the monitored command dumped core\n", "mount: /fsx 10.0.1.23@tcp:/x\n"])
def test_a_lustre_check_without_the_collectors_two_lines_is_unreadable_not_unmounted(text):
    """Before: lustre-check.txt's problems were dropped and any cut or failed run said "not mounted"."""
    from gpufleet.gates.checks.storage import check_lustre
    s = GateSettings(instance_type="p5.48xlarge", expect_lustre=True)
    [r] = check_lustre(_ev({B.LUSTRE: text}), s)
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "unreadable-lustre-check")
    [ok] = check_lustre(_ev({B.LUSTRE: "mount: \nwritable: no\n"}), s)  # the collector's own "no mount"
    assert ok.reason_code == "lustre-unmounted"
