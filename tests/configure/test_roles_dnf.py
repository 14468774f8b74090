"""The roles really applied, dnf family, to an Amazon Linux 2023 look-alike with local RPM repos.

The node is an overlay of the cached Debian base and the cached AL2023 layer (dnf 4, rpm, an
AL2023 os-release: see rpm_fixture_repo.py), so Ansible itself reports os_family RedHat and
pkg_mgr dnf and every role takes its dnf branch; nothing is overridden but the repository
URLs. As for apt: a --check --diff run first (must not fail and must change nothing on
disk), then the real run, then a second run that must change nothing (idempotence). The
assertions read the root's files, rpmdb and dnf versionlock list.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from configure_host import Overlay, chroot, converge, require_root
from gpufleet.bom import load_bom
from gpufleet.configure.extravars import LustreMount
from gpufleet.configure.inventory import Node
from gpufleet.configure.nccl_env import nccl_env_for
from gpufleet.configure.runner import AnsibleConfigurator, Verdict
from rpm_fixture_repo import AL2023_KERNEL, REPO_IN_ROOT, install_into, local_site_vars

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

OS = "al2023"
CANARY = "gpufleet-canary-2c9e4b7d1f0a3865-munge-key-dnf"
FSX = LustreMount("fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com", "hgfedcba", "/fsx")
HOST = "al2023-n1"


def _extravars(bom, urls):
    return local_site_vars(bom, OS, urls, FSX)


@pytest.fixture(scope="module")
def applied(base_rootfs, dnf_layer, collections_dir, tmp_path_factory):
    require_root("an AL2023 look-alike chroot")
    tmp = tmp_path_factory.mktemp("dnf-node")
    bom = load_bom()
    ov = Overlay([dnf_layer, base_rootfs], tmp)
    try:
        root = ov.root
        urls = install_into(root, bom, OS, dnf_layer, tmp)
        (root / "srv/canary-secret.b64").write_text(base64.b64encode(CANARY.encode()).decode() + "\n")
        assert not (root / "usr/bin/nvidia-smi").exists()  # the driver RPM ships it
        conf = AnsibleConfigurator(tmp / "state", collections=collections_dir)
        nodes = [Node(slot=HOST, address=str(root), groups=("slurm",))]
        runs = converge(conf, nodes, _extravars(bom, urls), root, _snapshot)
        yield {"root": root, "bom": bom, "state": tmp / "state", **runs}
    finally:
        ov.close()


def _snapshot(root: Path) -> dict[str, object]:
    paths = ("etc/nccl.conf", "etc/gpufleet", "etc/cdi", "etc/munge/munge.key", "opt/amazon",
             "etc/security/limits.d/90-gpufleet-efa.conf", "etc/yum.repos.d/gpufleet-cuda.repo",
             "etc/yum.repos.d/gpufleet-libnvidia-container.repo", "etc/dnf/plugins/versionlock.list")
    return {"files": {p for p in paths if (root / p).exists()}, "rpms": _rpms(root)}


def _rpms(root: Path) -> dict[str, str]:
    out = chroot(root, "rpm", "-qa", "--qf", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n")
    return dict(line.split() for line in out.splitlines())


def _result(applied, run):
    r = applied[run].hosts[HOST]
    assert r.verdict is Verdict.OK, r
    return r


def _events(run):
    for path in sorted((run.private_data_dir / "artifacts" / "run" / "job_events").glob("*.json")):
        yield json.loads(path.read_text())


def test_roles_take_the_dnf_branch(applied):
    # the facts Ansible gathered on the look-alike: what a real AL2023 node reports
    [facts] = [e["event_data"]["res"]["ansible_facts"] for e in _events(applied["first"])
               if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Gathering Facts"][:1]
    assert (facts["ansible_os_family"], facts["ansible_distribution"], facts["ansible_pkg_mgr"]) == \
        ("RedHat", "Amazon", "dnf")
    assert facts["ansible_distribution_major_version"] == "2023"
    ran = {e["event_data"]["task"] for e in _events(applied["first"]) if e.get("event") == "runner_on_ok"}
    assert "Install the pinned containerd and toolkit" in ran and "Install the pinned DCGM (dnf)" in ran
    assert "Hold NCCL" not in ran and "Hold DCGM" not in ran  # the apt branch never ran


def test_check_mode_run_succeeds_and_writes_nothing(applied):
    _result(applied, "check")
    assert not applied["check_touched"]


def test_first_run_applies_every_role(applied):
    assert _result(applied, "first").changed, "a first run on a bare root must change something"


def test_second_run_changes_nothing(applied):
    r = _result(applied, "second")
    assert r.changed == (), f"not idempotent: {r.changed}"


def test_packages_installed_at_pinned_versions(applied):
    root, bom = applied["root"], applied["bom"]
    v = bom.component_versions(OS)
    rpms = _rpms(root)
    drv = v["nvidia_driver"]
    for name in ("nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced", "kmod-nvidia-open-dkms"):
        assert rpms[name] == f"3:{drv}-1.amzn2023", name  # not the 570.999 decoy
    assert rpms["nvidia-fabric-manager"] == f"0:{v['fabric_manager']}-1"  # p5 is an NVSwitch SKU
    assert rpms["cuda-toolkit-12-8"] == f"0:{v['cuda']}-1"
    assert rpms["gdrcopy"].startswith(f"0:{v['gdrcopy']}-") and rpms["gdrcopy-kmod"].startswith(f"0:{v['gdrcopy']}-")
    assert rpms["libnccl"] == f"0:{v['nccl']}-1+cuda12.8"  # not the same NCCL built for a newer CUDA
    assert rpms["libnccl-devel"] == f"0:{v['nccl']}-1+cuda12.8"  # the headers nccl-tests builds against
    assert rpms["datacenter-gpu-manager-4-core"] == f"1:{v['dcgm']}-1"
    assert rpms["datacenter-gpu-manager-4-cuda12"] == f"1:{v['dcgm']}-1"
    assert rpms["containerd"].startswith(f"0:{v['containerd']}-")
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                 "libnvidia-container1"):
        assert rpms[name] == f"0:{v['nvidia_container_toolkit']}-1", name
    assert rpms["lustre-client"].startswith(f"0:{v['lustre_client']}-")
    assert rpms["libnccl-ofi"].startswith(f"0:{v['aws_ofi_nccl']}-")  # through the EFA installer
    assert "munge" in rpms and "python3-dnf-plugin-versionlock" in rpms


def test_dkms_gets_the_running_kernels_devel_and_headers(applied):
    """node-config-review F8: without them dnf takes the newest kernel-devel, maybe not the booted one."""
    rpms = _rpms(applied["root"])
    build = AL2023_KERNEL.removesuffix(".x86_64")
    for name in ("kernel-devel", "kernel-headers", "kernel-modules-extra"):
        assert rpms[name] == f"0:{build}", name


def test_versionlock_holds_the_stack(applied):
    root = applied["root"]
    rpms = _rpms(root)
    locks = set(chroot(root, "dnf", "-q", "versionlock", "list").split())
    for name in ("nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced", "kmod-nvidia-open-dkms",
                 "nvidia-fabric-manager", "cuda-toolkit-12-8", "gdrcopy", "gdrcopy-kmod", "libnccl", "libnccl-devel",
                 "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12", "containerd",
                 "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                 "libnvidia-container1", "lustre-client"):
        assert f"{name}-{rpms[name]}.*" in locks, f"{name} not locked at {rpms[name]}: {sorted(locks)}"
    # the lock is what dnf obeys: an upgrade would take the decoys, and finds nothing to do
    out = subprocess.run(["chroot", str(root), "dnf", "-y", "upgrade", "--assumeno"], capture_output=True, text=True)
    assert "570.999.99" not in out.stdout and "cuda12.99" not in out.stdout, out.stdout
    after = subprocess.run(["chroot", str(root), "dnf", "-q", "check-update", "--disableplugin=versionlock"],
                           capture_output=True, text=True)
    assert "570.999.99" in after.stdout  # the decoy is there to be taken without the lock


def test_rendered_configuration(applied):
    root, bom = applied["root"], applied["bom"]
    env = nccl_env_for(bom)
    conf_lines = [line for line in (root / "etc/nccl.conf").read_text().splitlines() if not line.startswith("#")]
    assert conf_lines == [f"{k}={v}" for k, v in env.nccl_conf.items()]
    env_text = (root / "etc/gpufleet/nccl.env").read_text()
    assert bom.digest() in env_text
    assert [line for line in env_text.splitlines() if not line.startswith("#")] == \
        [f"{k}={v}" for k, v in env.job_env.items()]
    assert "memlock    unlimited" in (root / "etc/security/limits.d/90-gpufleet-efa.conf").read_text()
    memlock = (root / "etc/systemd/system/slurmd.service.d/gpufleet-efa-memlock.conf").read_text()
    assert "[Service]\nLimitMEMLOCK=infinity\n" in memlock  # PAM limits never reach slurmd (M7)
    assert (root / "etc/modules-load.d/gpufleet-efa.conf").read_text() == "efa\n"
    # the plugin's directories on the loader path (node-config-review F4): deb multiarch, rpm lib64 and lib
    ld_dirs = [x for x in (root / "etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf").read_text().splitlines()
               if not x.startswith("#")]
    assert ld_dirs == ["/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "/opt/amazon/ofi-nccl/lib64",
                       "/opt/amazon/ofi-nccl/lib"]
    assert not (root / "etc/containerd/config.toml").exists()  # nodeadm owns containerd's config on AL2023
    assert "kind: nvidia.com/gpu" in (root / "etc/cdi/nvidia.yaml").read_text()
    cuda_repo = (root / "etc/yum.repos.d/gpufleet-cuda.repo").read_text()
    assert f"baseurl = file:///{REPO_IN_ROOT}/cuda/" in cuda_repo and "gpgcheck = 0" in cuda_repo
    fstab = [line for line in (root / "etc/fstab").read_text().splitlines() if " lustre " in line]
    assert fstab == [f"{FSX.dns_name}@tcp:/{FSX.mount_name} /fsx lustre "
                     "defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target 0 0"]
    key = root / "etc/munge/munge.key"
    assert key.read_text() == CANARY and oct(key.stat().st_mode & 0o777) == "0o600"


def test_node_facts_report_installed_versions(applied):
    root, bom = applied["root"], applied["bom"]
    got = json.loads(chroot(root, "/etc/ansible/facts.d/gpufleet.fact"))["versions"]
    want = bom.component_versions(OS)
    assert set(got) == set(want)
    for key in set(want) - {"kernel", "kubelet", "slurm"}:
        assert got[key] == want[key], key


def test_canary_secret_in_no_runner_artifact(applied):
    needles = [CANARY.encode(), base64.b64encode(CANARY.encode())]
    scanned = 0
    for path in Path(applied["state"]).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            scanned += 1
            assert not any(n in data for n in needles), f"secret leaked into {path}"
    assert scanned > 20
