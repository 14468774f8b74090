"""The BOM version gate: every pinned component read from its tool's real output and compared its way.

Nodes whose tool outputs are rendered from the project's BOM are admitted; skew in each component
is caught with a reason naming the component, what the BOM expects and what was found.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.bom import COMPONENT_KEYS, load_bom
from gpufleet.cli import main
from gpufleet.gates import checks, synth, versions
from gpufleet.gates.bundle import Bundle
from gpufleet.gates.parsers import system
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Verdict

from .conftest import REPO

BOM = load_bom(REPO / "images" / "bom.yaml")


def _gate(spec: synth.NodeSpec, settings: GateSettings):
    files = synth.node_files(spec)
    return checks.run_checks(Bundle(path=spec.slot, manifest=synth.manifest(spec, files), files=files), settings)[1]


def _versions_results(spec: synth.NodeSpec, settings: GateSettings) -> dict[str, object]:
    return {r.check_id: r for r in _gate(spec, settings) if r.check_id.startswith("versions.")}


def test_every_bom_component_has_a_reader():
    assert set(versions.BY_KEY) == set(COMPONENT_KEYS)


@pytest.mark.parametrize("component", versions.COMPONENTS, ids=lambda c: c.key)
def test_each_real_output_example_reads_to_its_version(component):
    want = {"nvidia_driver": "535.104.05", "fabric_manager": "570.172.08", "cuda": "12.8", "dcgm": "3.3.9",
            "nccl": "2.27.5", "aws_ofi_nccl": "1.16.0", "efa_installer": "1.41.0", "libfabric": "2.1.0amzn3.0",
            "gdrcopy": "2.5", "containerd": "1.7.27", "nvidia_container_toolkit": "1.17.8", "lustre_client": "2.15.6",
            "kubelet": "1.33.4-eks-e386d34", "slurm": "24.11.6", "kernel": "6.1.141-155.222.amzn2023.x86_64"}
    assert versions.read_version(component.key, component.example) == want[component.key]
    assert component.how and component.source


def test_nvcc_release_not_build_is_compared_with_the_bom_cuda():
    """The BOM pins the toolkit update (12.8.1); nvcc prints release 12.8 and its own build V12.8.93."""
    nvcc = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"
    found = versions.read_version("cuda", nvcc)
    assert found == "12.8"
    assert versions.matches("cuda", "12.8.1", found)
    assert not versions.matches("cuda", "12.8.1", versions.read_version("cuda", nvcc.replace("12.8", "12.6")))
    assert versions.expected_text("cuda", "12.8.1") == "12.8 (release of 12.8.1)"


@pytest.mark.parametrize("key, expected, found, ok", [
    ("kernel", ">= 6.1.141", "6.1.141-155.222.amzn2023.x86_64", True),
    ("kernel", ">= 6.1.141", "6.1.150-160.1.amzn2023.x86_64", True),
    ("kernel", ">= 6.1.141", "6.1.119-126.201.amzn2023.x86_64", False),  # older than the floor
    ("kernel", ">= 6.1.141", "6.12.40-63.114.amzn2023.x86_64", False),  # another family
    ("kernel", ">= 6.8.0-1029-aws", "6.8.0-1031-aws", True),
    ("kernel", ">= 6.8.0-1029-aws", "6.8.0-1017-aws", False),
    ("gdrcopy", "2.5.1", "2.5", True), ("gdrcopy", "2.5.1", "2.4", False),
    ("kubelet", "1.33.4", "1.33.4-eks-e386d34", True), ("kubelet", "1.33.4", "1.33.5-eks-1", False),
    ("nvidia_driver", "570.172.08", "570.172.08", True), ("nvidia_driver", "570.172.08", "570.172.8", False),
    ("libfabric", "2.1.0amzn3.0", "2.1.0amzn3.0", True), ("libfabric", "2.1.0amzn3.0", "2.1.0amzn2.0", False),
    ("aws_ofi_nccl", "1.7.4", "1.7.4-aws", True), ("containerd", "1.7.27", "v1.7.27", True),
])
def test_comparison_per_component(key, expected, found, ok):
    assert versions.matches(key, expected, found) is ok


def test_synth_default_versions_are_the_project_bom():
    assert synth.DEFAULT_VERSIONS == synth.bom_versions(BOM, "al2023")


def test_preflight_collects_exactly_the_components_commands():
    play = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())[0]
    assert play["vars"]["gpufleet_version_commands"] == versions.preflight_commands()


@pytest.mark.parametrize("os", ["al2023", "ubuntu-22.04", "ubuntu-24.04"])
@pytest.mark.parametrize("pool", ["kubernetes", "slurm", None])
def test_a_node_built_from_the_bom_is_admitted_on_every_os_and_pool(os, pool):
    spec = synth.NodeSpec(slot="n0", os=os, versions=synth.bom_versions(BOM, os))
    settings = GateSettings(expected_by_os=versions.expectations_by_os(BOM, pool), pool=pool)
    results = _versions_results(spec, settings)
    assert all(r.verdict is Verdict.PASS for r in results.values()), [r for r in results.values() if r.verdict.rank]
    agents = {"kubernetes": {"kubelet"}, "slurm": {"slurm"}, None: {"kubelet", "slurm"}}[pool]
    assert {k.removeprefix("versions.") for k in results} == set(versions.BY_KEY) - (versions.AGENT_KEYS - agents)


def _skewed(key: str) -> str:
    return {"kernel": "6.1.119-126.201.amzn2023.x86_64", "nvidia_driver": "570.158.01", "fabric_manager": "570.158.01",
            "cuda": "12.6.3", "dcgm": "4.1.1", "nccl": "2.26.2", "aws_ofi_nccl": "1.14.0", "efa_installer": "1.40.0",
            "libfabric": "2.0.0amzn2.0", "gdrcopy": "2.4.4", "containerd": "1.7.23", "nvidia_container_toolkit": "1.17.4",
            "lustre_client": "2.15.5", "kubelet": "1.32.7", "slurm": "24.05.8"}[key]


@pytest.mark.parametrize("key", sorted(versions.BY_KEY))
def test_skew_in_each_component_is_caught_naming_component_expected_and_found(key):
    installed = dict(synth.DEFAULT_VERSIONS, **{key: _skewed(key)})
    settings = GateSettings(expected_by_os=versions.expectations_by_os(BOM))
    r = _versions_results(synth.NodeSpec(slot="n0", versions=installed), settings)[f"versions.{key}"]
    found = versions.read_version(key, synth.version_output(key, _skewed(key))[0])
    want = versions.expected_text(key, versions.expectation(key, BOM, "al2023"))
    assert (r.verdict, r.reason_code) == (Verdict.QUARANTINE, f"version-{key.replace('_', '-')}")
    assert r.message == f"{key}: found {found}, the BOM pins {want}" and (r.measured, r.expected) == (found, want)
    others = [x for k, x in _versions_results(synth.NodeSpec(slot="n0", versions=installed), settings).items()
              if k != f"versions.{key}" and x.verdict is not Verdict.PASS]
    # the driver's version also reaches the gate through nvidia-smi and the kernel log; nothing else moves
    assert others == []


@pytest.mark.parametrize("key", ["cuda", "nvidia_container_toolkit", "gdrcopy", "nccl", "efa_installer"])
def test_an_absent_tool_is_reported_missing_not_as_a_version(key):
    settings = GateSettings(expected_by_os=versions.expectations_by_os(BOM))
    r = _versions_results(synth.NodeSpec(slot="n0", versions=dict(synth.DEFAULT_VERSIONS, **{key: None})),
                          settings)[f"versions.{key}"]
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, f"tool-missing-{key.replace('_', '-')}")
    assert r.measured.startswith("tool missing: ") and versions.BY_KEY[key].tool in r.message


def test_pool_agent_required_only_for_its_pool():
    without_agents = {k: v for k, v in synth.DEFAULT_VERSIONS.items() if k not in versions.AGENT_KEYS}
    spec = synth.NodeSpec(slot="n0", versions=dict(without_agents, kubelet=None))
    k8s = _versions_results(spec, GateSettings(expected_by_os=versions.expectations_by_os(BOM, "kubernetes"),
                                               pool="kubernetes"))
    assert k8s["versions.kubelet"].reason_code == "tool-missing-kubelet" and "versions.slurm" not in k8s
    anyp = _versions_results(spec, GateSettings(expected_by_os=versions.expectations_by_os(BOM)))
    assert "versions.kubelet" not in anyp and "versions.slurm" not in anyp


def test_node_os_picks_the_pins_and_an_unpinned_os_is_quarantined():
    by_os = versions.expectations_by_os(BOM)
    ubuntu = synth.NodeSpec(slot="u", os="ubuntu-22.04", versions=synth.bom_versions(BOM, "ubuntu-22.04"))
    assert _versions_results(ubuntu, GateSettings(expected_by_os=by_os))["versions.kernel"].verdict is Verdict.PASS
    # the AL2023 kernel on a node that says it runs Ubuntu: the Ubuntu pins apply, so the kernel is skew
    mixed = synth.NodeSpec(slot="m", os="ubuntu-22.04")
    assert _versions_results(mixed, GateSettings(expected_by_os=by_os))["versions.kernel"].reason_code == "version-kernel"
    stack_only = GateSettings(expected_by_os=versions.expectations_by_os(BOM, only_os="al2023"))
    r = _versions_results(ubuntu, stack_only)["versions.os"]
    assert (r.verdict, r.reason_code, r.measured) == (Verdict.QUARANTINE, "node-os", "ubuntu-22.04")


def test_versions_json_both_forms_and_problems():
    old = system.parse_versions(json.dumps({"cuda": "Cuda compilation tools, release 12.8, V12.8.93", "mystery": "1"}))
    assert old.versions == {"cuda": "12.8"} and old.problems == ("mystery: no known version pattern",)
    new = system.parse_versions(json.dumps({"dcgm": {"output": "bash: line 1: dcgmi: command not found", "exit_code": 127},
                                            "slurm": {"output": "garbage", "exit_code": 0}}))
    assert new.missing == {"dcgm": "bash: line 1: dcgmi: command not found"}
    assert new.problems == ("slurm: no version in 'garbage'",)
    assert system.parse_versions("[").problems and system.parse_versions("[]").problems


@pytest.mark.parametrize("text, name", [
    ('NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nVERSION_ID="2023"\n', "al2023"),
    ("NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nID=ubuntu\n", "ubuntu-24.04"),
    ("ID=debian\nVERSION_ID=\"12\"\n", "debian-12"), ("nothing", None),
])
def test_node_os_from_os_release(text, name):
    assert versions.node_os(text) == name


# ---------------------------------------------------------------------------------- the CLI

def _bundles(tmp_path, specs):
    d = tmp_path / "bundles"
    for s in specs:
        synth.write_node(d / s.slot, s)
    return d


def test_gate_compares_with_the_project_bom_by_default_and_names_the_skew(tmp_path):
    d = _bundles(tmp_path, [synth.NodeSpec(slot="ok"),
                            synth.NodeSpec(slot="skew", versions=dict(synth.DEFAULT_VERSIONS, cuda="12.6.3"))])
    r = CliRunner().invoke(main, ["gate", str(d), "--json"])
    assert r.exit_code == 3, r.output
    recs = {x["slot"]: x for x in json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"]}
    assert recs["ok"]["action"] == "admit" and recs["skew"]["reason_codes"] == ["version-cuda"]
    assert "cuda: found 12.6, the BOM pins 12.8 (release of 12.8.1)" in recs["skew"]["message"]
    r = CliRunner().invoke(main, ["gate", str(d), "--no-versions"])
    assert r.exit_code == 0 and "2 admit" in r.output
    assert CliRunner().invoke(main, ["gate", str(d), "--no-versions", "--bom", str(REPO / "images" / "bom.yaml")]
                              ).exit_code == 2


def test_gate_with_a_stack_uses_its_bom_os_and_pool(tmp_path):
    project = tmp_path / "proj"
    (project / "stacks").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: p\nruntime: python\nstackConfigDir: stacks\n")
    bom = yaml.safe_load((REPO / "images" / "bom.yaml").read_text())
    bom["components"]["nccl"]["version"] = "2.26.2"  # this stack's own BOM pins another NCCL
    (project / "my-bom.yaml").write_text(yaml.safe_dump(bom))
    stack = yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    image = stack["config"].setdefault("gpufleet:image", {})
    image.update(bom="my-bom.yaml", os="ubuntu-22.04")
    stack["config"]["gpufleet:pool"] = {"type": "slurm"}
    (project / "stacks" / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack))
    os = "ubuntu-22.04"
    d = _bundles(tmp_path, [synth.NodeSpec(slot="n0", os=os, versions=synth.bom_versions(BOM, os))])
    r = CliRunner().invoke(main, ["--project", str(project), "gate", str(d), "-s", "dev", "--json"])
    assert r.exit_code == 3, r.output
    rec = json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"][0]
    assert rec["reason_codes"] == ["version-nccl"] and "the BOM pins 2.26.2" in rec["message"]
    assert rec["bom_digest"] == load_bom(project / "my-bom.yaml").digest()
    compared = {c["check_id"] for c in rec["checks"]}
    assert "versions.slurm" in compared and "versions.kubelet" not in compared  # the Slurm pool's agent only
    d2 = _bundles(tmp_path / "al", [synth.NodeSpec(slot="al")])  # an AL2023 node in an Ubuntu stack
    r = CliRunner().invoke(main, ["--project", str(project), "gate", str(d2), "-s", "dev", "--json"])
    assert json.loads(r.stdout[:r.stdout.rindex("}") + 1])["records"][0]["reason_codes"] == ["node-os"]
    (project / "my-bom.yaml").write_text("schema: 1\nname: x\n")
    r = CliRunner().invoke(main, ["--project", str(project), "gate", str(d), "-s", "dev"])
    assert r.exit_code == 2 and "my-bom.yaml" in r.output


def test_gate_outside_a_project_needs_a_bom(tmp_path, monkeypatch):
    d = _bundles(tmp_path, [synth.NodeSpec(slot="n0")])
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUFLEET_PROJECT", raising=False)
    r = CliRunner().invoke(main, ["gate", str(d)])
    assert r.exit_code == 2 and "--bom" in r.output
    assert CliRunner().invoke(main, ["gate", str(d), "--bom", str(REPO / "images" / "bom.yaml")]).exit_code == 0
