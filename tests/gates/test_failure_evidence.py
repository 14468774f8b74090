"""What real outputs showed: each failure is reported with the evidence that proves it.

Older aws-ofi-nccl builds name the transport `AWS Libfabric` and print `NET/OFI Using ...`;
a provider line is the only proof of EFA, libfabric's empty-provider line the proof of its
absence; an Xid names the GPU to reset; an absent tool is named; a broken manifest.json costs
its own node a retest and nobody else anything.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.gates import baseline, bundle as B, checks, synth
from gpufleet.gates.bundle import Bundle
from gpufleet.gates.parsers import nccl_debug
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Verdict

P, R, Q = Verdict.PASS, Verdict.REMEDIATE, Verdict.QUARANTINE
EMPTY = "libfabric:53869:1772632639::core: core: fi_getinfo_():1391<warn> fi_getinfo: provider efa output empty list"


def test_older_plugin_over_aws_libfabric_is_efa(own):
    net = nccl_debug.parse_net(own("nccl-debug__aws_libfabric_old_plugin.txt"))
    assert (net.network, net.provider, net.nics, net.plugin_version) == ("AWS Libfabric", "efa", 4, "1.7.4-aws")
    assert net.efa_used and not net.socket_fallback and net.nccl_version == "2.18.5"
    assert baseline.check_efa_used(net).verdict is P


def test_libfabric_without_a_provider_line_is_unproven_never_socket(own):
    text = "".join(ln for ln in own("nccl-debug__aws_libfabric_old_plugin.txt").splitlines(keepends=True)
                   if "Selected Provider" not in ln)
    net = nccl_debug.parse_net(text)
    assert net.network == "AWS Libfabric" and net.provider is None and not net.socket_fallback
    r = baseline.check_efa_used(net)
    assert (r.verdict, r.reason_code) == (R, "efa-provider-unproven") and "socket" not in r.message
    assert "provider unproven" in r.message
    bare = nccl_debug.parse_net("host:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")  # no network line at all
    assert baseline.check_efa_used(bare).reason_code == "efa-provider-unproven"


def test_libfabric_empty_efa_list_is_quoted_as_the_evidence():
    text = f"host:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n{EMPTY}\nhost:1:1 [0] NCCL INFO Using network Socket\n"
    r = baseline.check_efa_used(nccl_debug.parse_net(text))
    assert (r.verdict, r.reason_code) == (Q, "efa-provider-empty") and EMPTY in r.measured


def test_fi_info_provider_check_quotes_the_libfabric_line():
    spec = synth.NodeSpec(slot="n0", faults=frozenset({"efa_missing"}))
    files = dict(synth.node_files(spec), **{B.FI_INFO: f"{EMPTY}\nfi_getinfo: -61\n"})
    r = _results(spec, files)["efa.provider"]
    assert (r.verdict, r.measured) == (Q, EMPTY)


def _results(spec, files=None, settings=GateSettings()):
    files = files or synth.node_files(spec)
    b = Bundle(path=spec.slot, manifest=synth.manifest(spec, files), files=files)
    return {r.check_id: r for r in checks.run_checks(b, settings)[1]}


@pytest.mark.parametrize("gpu, bus", [(0, "00000000:53:00.0"), (3, "00000000:83:00.0"), (7, "00000000:C3:00.0")])
def test_xid_reason_names_the_gpu(gpu, bus):
    r = _results(synth.NodeSpec(slot="n0", xids=(79,), xid_gpu=gpu))["kernel.xid"]
    assert (r.verdict, r.reason_code) == (Q, "xid-79")
    assert r.measured == f"Xid 79 on GPU {gpu} ({bus})"
    assert r.message == f"Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS on GPU {gpu} ({bus})"


def test_xid_on_a_gpu_nvidia_smi_no_longer_lists_names_its_address():
    spec = synth.NodeSpec(slot="n0", xids=(79,), xid_gpu=9)  # 0xe3: not one of the 8 GPUs listed
    assert _results(spec)["kernel.xid"].measured == "Xid 79 on PCI 0000:e3:00 (not listed by nvidia-smi)"


@pytest.mark.parametrize("name, check_id, code", [
    (B.FABRICMANAGER, "fabric_manager", "tool-missing-systemctl"),
    (B.DCGM_DIAG, "dcgm.diag", "tool-missing-dcgmi"),
    (B.CONTAINER_GPUS, "container.gpus", "tool-missing-docker"),
    (B.NVLINK_S, "nvlink.status", "tool-missing-nvidia-smi"),
])
def test_absent_tool_is_named_not_parsed(name, check_id, code):
    spec = synth.NodeSpec(slot="n0")
    tool = code.removeprefix("tool-missing-")
    files = dict(synth.node_files(spec), **{name: f"bash: line 1: {tool}: command not found\n"})
    r = _results(spec, files)[check_id]
    assert (r.verdict, r.reason_code) == (R, code)
    assert r.measured == f"tool missing: bash: line 1: {tool}: command not found"


def test_fabric_manager_error_line_is_shown_whole():
    spec = synth.NodeSpec(slot="n0")
    line = "System has not been booted with systemd as init system (PID 1). Can't operate."
    r = _results(spec, dict(synth.node_files(spec), **{B.FABRICMANAGER: line + "\nFailed to connect to bus\n"}))
    assert (r["fabric_manager"].reason_code, r["fabric_manager"].measured) == ("fabricmanager-inactive", line)
    r = _results(spec, dict(synth.node_files(spec), **{B.FABRICMANAGER: "failed\n"}))
    assert r["fabric_manager"].measured == "failed"


BAD_MANIFESTS = {
    "null": (b"null", "manifest.json holds null, expected an object with slot and files"),
    "list": (b"[1, 2]", "manifest.json holds a list, expected an object with slot and files"),
    "number": (b"42", "manifest.json holds a number, expected an object with slot and files"),
    "string": (b'"n0"', "manifest.json holds a string, expected an object with slot and files"),
    "types": (b'{"slot": 5, "files": "x", "batch": "first"}', "manifest.json fields are invalid: slot: Input should be"),
    "file-types": (b'{"slot": "x", "files": {"a.txt": {"command": 1, "exit_code": "zero"}}}',
                   "manifest.json fields are invalid: files.a.txt.command: Input should be a valid string"),
    "version": (b'{"slot": "x", "format_version": "two"}', "manifest.json fields are invalid: format_version"),
    "slot-path": (b'{"slot": "../../etc/x"}', "manifest.json fields are invalid: slot: Value error, a slot name"),
    "truncated": (b'{"slot": "n0", "files": {"nvidia-smi-q.txt": {"comm', "manifest.json is not valid JSON: "),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "manifest.json is not UTF-8 text (invalid start byte"),
    "empty": (b"", "manifest.json is not valid JSON: Expecting value"),
}


def test_bad_manifests_cost_their_node_a_retest_and_nobody_else_anything(tmp_path):
    root = tmp_path / "bundles"
    synth.write_node(root / "good", synth.NodeSpec(slot="good"))
    synth.write_node(root / "also-good", synth.NodeSpec(slot="also-good"))
    for name, (data, _) in BAD_MANIFESTS.items():
        synth.write_node(root / name, synth.NodeSpec(slot=name))
        (root / name / B.MANIFEST).write_bytes(data)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["gate", str(root), "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output  # retests, no quarantine, no traceback
    assert "Traceback" not in r.output
    recs = {x["slot"]: x for x in json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"]}
    assert set(recs) == set(BAD_MANIFESTS) | {"good", "also-good"}  # slot = folder name for the bad ones
    assert recs["good"]["action"] == recs["also-good"]["action"] == "admit"
    for name, (_, problem) in BAD_MANIFESTS.items():
        rec = recs[name]
        assert (rec["action"], rec["reason_codes"]) == ("retest", ["bad-manifest"]), name
        check = next(c for c in rec["checks"] if c["check_id"] == "bundle.manifest")
        assert check["verdict"] == "REMEDIATE" and check["measured"].startswith(problem), (name, check["measured"])
        assert (out / f"{name}.json").is_file()
    report = ["gate.json", "gate.md", "gate-junit.xml", "gate.html"]  # --out also holds the gate report
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{n}.json" for n in recs] + ["junit.xml"] + report)


def test_a_bundle_without_manifest_is_gated_and_retested(tmp_path):
    synth.write_node(tmp_path / "n0", synth.NodeSpec(slot="n0"))
    (tmp_path / "n0" / B.MANIFEST).unlink()
    rec = json.loads(CliRunner().invoke(main, ["gate", str(tmp_path), "--json"]).stdout.rsplit("}", 1)[0] + "}")["records"][0]
    assert (rec["slot"], rec["action"], rec["reason_codes"]) == ("n0", "retest", ["missing-manifest"])
