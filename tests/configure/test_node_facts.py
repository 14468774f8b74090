"""node_facts reports what the node's tools and package database say, not what the BOM pins.

The role is applied to a fresh overlay of the Debian base where every component is installed
(dummy packages, stub tools) at a version *different* from images/bom.yaml: a fact that
echoed the BOM, or read the wrong package, would disagree here, where the chroot tests (built
from the BOM) cannot tell.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apt_fixture_repo import Pkg, build_deb
from configure_host import PROJECT_ROOT, Overlay, chroot
from node_stubs import install_tool
from gpufleet.bom import load_bom
from gpufleet.configure.inventory import ChrootConnection, Node
from gpufleet.configure.runner import AnsibleConfigurator, Verdict

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

OS = "ubuntu-22.04"
# what this node really has: every value differs from the BOM (asserted below)
INSTALLED = {
    "nvidia_driver": "575.57.08", "fabric_manager": "575.57.08", "cuda": "12.9.1", "dcgm": "4.1.1",
    "nccl": "2.26.2", "aws_ofi_nccl": "1.14.2", "efa_installer": "1.40.0", "libfabric": "2.0.0amzn4.0",
    "gdrcopy": "2.4.4", "containerd": "1.7.24", "nvidia_container_toolkit": "1.17.4",
    "lustre_client": "2.15.5", "kubelet": "1.32.9", "slurm": "24.05.8",
}
PLAY = """
- name: Record installed versions
  hosts: gpu
  gather_facts: false
  roles:
    - role: node_facts
"""


def _packages(v: dict[str, str]) -> list[Pkg]:
    return [
        Pkg("nvidia-fabricmanager-575", f"{v['fabric_manager']}-1"),
        Pkg("cuda-toolkit-12-9", f"{v['cuda']}-1"),
        Pkg("datacenter-gpu-manager-4-core", f"1:{v['dcgm']}-1"),
        Pkg("libnccl2", f"{v['nccl']}-1+cuda12.9"),
        Pkg("libnccl-ofi", f"{v['aws_ofi_nccl']}-1"),
        Pkg("libgdrapi", f"{v['gdrcopy']}-1"),
        Pkg("containerd", f"{v['containerd']}-0ubuntu1~22.04.2"),
        Pkg("nvidia-container-toolkit", f"{v['nvidia_container_toolkit']}-1"),
        Pkg("lustre-client-utils", f"{v['lustre_client']}-1fsx20"),
    ]


def _stub_tools(root: Path, v: dict[str, str]) -> None:
    gpus = "\n".join(f"{v['nvidia_driver']}, NVIDIA H200, 165492200{i}, 00000000:{0x19 + i:02X}:00.0" for i in range(8))
    install_tool(root, "/usr/local/bin/nvidia-smi", f"cat <<'CSV'\n{gpus}\nCSV")
    install_tool(root, "/usr/local/bin/fi_info",
                 f"echo '/opt/amazon/efa/bin/fi_info: {v['libfabric']}'; echo 'libfabric: {v['libfabric']}'; "
                 "echo 'libfabric api: 2.0'")
    install_tool(root, "/usr/local/bin/kubelet", f"echo 'Kubernetes v{v['kubelet']}-eks-113cf36'")
    install_tool(root, "/usr/local/sbin/slurmd", f"echo 'slurm {v['slurm']}'")
    efa = root / "opt/amazon/efa_installed_packages"
    efa.parent.mkdir(parents=True, exist_ok=True)
    efa.write_text(f"# EFA installer version: {v['efa_installer']}\n# Debug packages installed: no\n"
                   f"# Packages installed:\nlibfabric-aws-bin_{v['libfabric']}_amd64 libnccl-ofi_{v['aws_ofi_nccl']}-1_amd64\n")


@pytest.fixture(scope="module")
def node(base_rootfs, collections_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("node-facts")
    ov = Overlay([base_rootfs], tmp)
    try:
        debs = ov.root / "var/cache/gpufleet-debs"
        debs.mkdir(parents=True)
        for pkg in _packages(INSTALLED):
            build_deb(pkg, debs, tmp)
        chroot(ov.root, "sh", "-c", "dpkg -i /var/cache/gpufleet-debs/*.deb >/dev/null")
        _stub_tools(ov.root, INSTALLED)
        playbooks = tmp / "playbooks"
        playbooks.mkdir()
        (playbooks / "roles").symlink_to(PROJECT_ROOT / "playbooks" / "roles")
        (playbooks / "facts.yml").write_text(PLAY)
        conf = AnsibleConfigurator(tmp / "state", playbook_dir=playbooks, collections=collections_dir)
        run = conf.run([Node(slot="facts-n1", address=str(ov.root))], ChrootConnection(), {}, playbook="facts.yml")
        yield {"root": ov.root, "run": run}
    finally:
        ov.close()


def test_the_node_really_differs_from_the_bom():
    bom = load_bom().component_versions(OS)
    same = {k for k, v in INSTALLED.items() if bom.get(k) == v}
    assert not same, f"these components would not tell the fact from the BOM: {sorted(same)}"


def test_the_fact_reports_what_the_tools_say(node):
    assert node["run"].hosts["facts-n1"].verdict is Verdict.OK, node["run"].hosts["facts-n1"]
    fact = json.loads(chroot(node["root"], "/etc/ansible/facts.d/gpufleet.fact"))
    got = fact["versions"]
    assert {k: got[k] for k in INSTALLED} == INSTALLED
    assert fact["inventory"]["gpu_count"] == 8 and fact["inventory"]["gpu_models"] == ["NVIDIA H200"]


def test_ansible_sees_the_same_versions(node):
    events = [json.loads(p.read_text()) for p in
              sorted((node["run"].private_data_dir / "artifacts" / "run" / "job_events").glob("*.json"))]
    [res] = [e["event_data"]["res"] for e in events
             if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Report installed versions"]
    got = res["ansible_local.gpufleet.versions"]
    assert {k: got[k] for k in INSTALLED} == INSTALLED
