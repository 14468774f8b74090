"""`gpufleet gate DIR` through click's CliRunner; bundles on disk; the preflight playbook."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.bom import load_bom
from gpufleet.cli import main
from gpufleet.gates import bundle as B, synth, versions
from gpufleet.gates.admission import AdmissionRecord

REPO = Path(__file__).resolve().parents[2]


def _write(tmp: Path, specs) -> Path:
    d = tmp / "bundles"
    for s in specs:
        synth.write_node(d / s.slot, s)
    return d


def test_gate_all_healthy_exit_0(tmp_path):
    d = _write(tmp_path, [synth.NodeSpec(slot=f"n{i}") for i in range(3)])
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["gate", str(d), "--out", str(out)])  # the project's images/bom.yaml
    assert r.exit_code == 0, r.output
    assert "3 node(s): 3 admit, 0 retest, 0 quarantine" in r.output
    rec = AdmissionRecord.model_validate_json((out / "n0.json").read_text())
    assert rec.verdict.value == "PASS" and rec.bom_digest == load_bom(REPO / "images" / "bom.yaml").digest()
    assert rec.busbw.intra_node_gbs == 480.0
    assert {c.check_id for c in rec.checks} >= {f"versions.{k}" for k in versions.BY_KEY}  # every component compared
    assert rec.instance_id == "i-0123456789abcdef0" and rec.schema_version == 1 and rec.gpufleet_version
    suite = ET.parse(out / "junit.xml").getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) == sum(len(AdmissionRecord.model_validate_json((out / f"n{i}.json").read_text()).checks)
                             for i in range(3))
    assert not suite.findall(".//failure")


def test_gate_quarantine_exit_3_with_junit_failures(tmp_path):
    specs = [synth.NodeSpec(slot="good"), synth.NodeSpec(slot="bad", xids=(79,), faults=frozenset({"efa_missing"})),
             synth.NodeSpec(slot="retest", faults=frozenset({"remap_pending"}))]
    d = _write(tmp_path, specs)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["gate", str(d), "--out", str(out), "--json"])
    assert r.exit_code == 3, r.output
    records = {x["slot"]: x for x in json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"]}
    assert records["bad"]["action"] == "quarantine" and records["bad"]["reason_codes"][0] == "xid-79"
    assert records["retest"]["action"] == "retest" and records["good"]["action"] == "admit"
    failures = ET.parse(out / "junit.xml").getroot().findall(".//failure")
    assert {f.get("type") for f in failures} == {"QUARANTINE", "REMEDIATE"}
    assert any("xid-79" in f.get("message") for f in failures)


def test_gate_missing_or_empty_dir_exit_2(tmp_path):
    r = CliRunner().invoke(main, ["gate", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "nope" in r.output
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["gate", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "no node bundle" in r.output
    bad = tmp_path / "bom.yaml"
    bad.write_text("- a list\n")
    d = _write(tmp_path, [synth.NodeSpec(slot="n0")])
    r = CliRunner().invoke(main, ["gate", str(d), "--bom", str(bad)])
    assert r.exit_code == 2 and str(bad) in r.output
    r = CliRunner().invoke(main, ["gate", str(d), "--bom", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "nope.yaml" in r.output and "not found" in r.output
    assert CliRunner().invoke(main, ["gate", str(d), "--instance-type", "p9.huge"]).exit_code == 2


def test_bundle_round_trip_and_not_collected(tmp_path):
    spec = synth.NodeSpec(slot="n0")
    files = synth.node_files(spec)
    del files[B.DCGM_DIAG]
    m = synth.manifest(spec, {**files, B.DCGM_DIAG: ""})
    B.write_bundle(tmp_path / "n0", files, m)
    b = B.read_bundle(tmp_path / "n0")
    assert b.slot == "n0" and b.problems == ()
    got = b.get(B.NVLINK_S)
    assert got.collected and got.exit_code == 0 and got.record.command == "nvidia-smi nvlink -s"
    missing = b.get(B.DCGM_DIAG)
    assert not missing.collected and missing.reason == "listed in the manifest but missing"
    assert b.get(B.TOPO_M).collected and not b.get("never.txt").collected
    with pytest.raises(ValueError):
        B.write_bundle(tmp_path / "x", {"../evil": "x"}, m)


def test_bundle_without_manifest_or_with_newer_format(tmp_path):
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / B.FABRICMANAGER).write_text("active\n")
    b = B.read_bundle(tmp_path / "n1")
    assert b.slot == "n1" and "manifest.json missing" in b.problems
    (tmp_path / "n2").mkdir()
    (tmp_path / "n2" / B.MANIFEST).write_text(json.dumps({"format_version": 9, "slot": "n2", "new_field": 1}))
    b2 = B.read_bundle(tmp_path / "n2")
    assert b2.slot == "n2" and "newer" in b2.problems[0]
    (tmp_path / "n3").mkdir()
    with pytest.raises(B.BundleError):
        B.read_bundle(tmp_path / "n3")
    assert [p.name for p in B.find_bundles(tmp_path)] == ["n1", "n2"]


def test_preflight_playbook_syntax_check():
    exe = Path(sys.executable).with_name("ansible-playbook")
    if not exe.exists():
        exe = shutil.which("ansible-playbook")
    assert exe, "ansible-core is a project dependency"
    res = subprocess.run([str(exe), "--syntax-check", "-i", "localhost,", str(REPO / "playbooks" / "preflight.yml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow  # real ansible-playbook, ~25 s
def test_preflight_playbook_on_a_gpu_less_host_quarantines_with_the_missing_tools(tmp_path):
    """Run the real play against localhost (no GPU, no NVIDIA or EFA tools here): every command is
    recorded with its exit code, the bundle reads back, and the gate says exactly why it refuses
    the node: nvidia-smi is missing (quarantine), each other absent tool is named, no garbled value."""
    path = "/usr/bin:/bin"
    tools = ("nvidia-smi", "dcgmi", "fi_info", "nv-fabricmanager")
    present = [t for t in tools if shutil.which(t, path=path + ":/opt/amazon/efa/bin:/usr/local/cuda/bin")]
    if present:
        pytest.skip(f"this host has {present}: it is not the GPU-less host this test describes")
    exe = Path(sys.executable).with_name("ansible-playbook")
    res = subprocess.run(
        [str(exe), "-i", "localhost,", "-c", "local", str(REPO / "playbooks" / "preflight.yml"),
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", "gpufleet_become=false",
         "-e", f"gpufleet_bundle_dir={tmp_path}/bundles", "-e", f"gpufleet_remote_bundle_dir={tmp_path}/remote",
         "-e", "gpufleet_instance_type=p5.48xlarge"],
        capture_output=True, text=True, timeout=300, env={"ANSIBLE_LOCALHOST_WARNING": "0", "PATH": path,
                                                          "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    b = B.read_bundle(tmp_path / "bundles" / "localhost")
    assert b.problems == () and b.manifest_problem is None and b.manifest.collected_by == "preflight.yml"
    assert set(b.manifest.files) == set(B.BUNDLE_FILES)  # the -J file too (issue 19: BUNDLE.md's promise kept)
    assert b.manifest.files[B.NCCL_INTRA_JSON].exit_code == 3 and "no -J output" in b.files[B.NCCL_INTRA_JSON]
    rec = b.manifest.files[B.DCGM_DIAG]
    assert rec.command == "dcgmi diag -r 2 -j" and rec.exit_code == 127 and rec.ended >= rec.started
    collected = json.loads(b.files[B.VERSIONS])
    assert set(collected) == {c["key"] for c in versions.preflight_commands()}  # every component + the OS
    assert collected["dcgm"]["exit_code"] == 127 and "dcgmi: command not found" in collected["dcgm"]["output"]

    r = CliRunner().invoke(main, ["gate", str(tmp_path / "bundles"), "--json"])
    assert r.exit_code == 3, r.output
    record = json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"][0]
    assert record["action"] == "quarantine" and record["reason_codes"][0] == "tool-missing-nvidia-smi"
    checks = {c["check_id"]: c for c in record["checks"]}
    assert checks["gpu.count"]["verdict"] == "QUARANTINE"
    assert checks["gpu.count"]["measured"] == "tool missing: bash: line 1: nvidia-smi: command not found"
    for check_id, code in (("nvlink.status", "tool-missing-nvidia-smi"), ("ecc.row_remap", "tool-missing-nvidia-smi"),
                           ("dcgm.diag", "tool-missing-dcgmi"), ("efa.provider", "tool-missing-fi_info"),
                           ("efa.nccl_net", "tool-missing-all_reduce_perf"),
                           ("nccl.intra.busbw", "tool-missing-all_reduce_perf")):
        assert (checks[check_id]["verdict"], checks[check_id]["reason_code"]) == ("REMEDIATE", code), check_id
        assert checks[check_id]["measured"].startswith("tool missing: "), check_id
    assert not any(c["measured"].startswith("bash:") for c in record["checks"])  # a shell error is never a value
    fm = checks["fabric_manager"]  # systemctl's own answer, whole: a state word or its error line
    assert fm["reason_code"] == "fabricmanager-inactive" and (fm["measured"] in ("inactive", "unknown", "failed")
                                                             or len(fm["measured"].split()) > 1)


def test_the_shells_line_is_found_after_a_preamble_the_command_printed_first():
    """preflight's EFA loopback echoes the peer-memory modules before running all_reduce_perf: with
    exit 127 the absent tool is the shell's line, wherever it is, not the file's name."""
    from gpufleet.gates.parsers.common import absent_command, missing_tool

    text = "gpufleet peermem: \nbash: line 1: /opt/nccl-tests/build/all_reduce_perf: No such file or directory\n"
    line = missing_tool(text, 127)
    assert line == "bash: line 1: /opt/nccl-tests/build/all_reduce_perf: No such file or directory"
    assert absent_command(line) == "all_reduce_perf"
    assert missing_tool(text, 0) is None  # a tool that ran: only a first line of the shell's is trusted
    assert missing_tool("gpufleet peermem: \n", 127) == "gpufleet peermem:"
