"""The roles really applied, apt family, to a Debian chroot with a local repo of dummy packages.

One fresh overlay of the cached debootstrap base per module: a --check --diff run first (must
not fail and must change nothing on disk), then the real run, then a second run that must
change nothing (idempotence). The assertions read the chroot's files and dpkg database.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from apt_fixture_repo import FSX, install_into, local_site_vars
from configure_host import Overlay, chroot, converge
from gpufleet.bom import load_bom
from gpufleet.configure.inventory import Node
from gpufleet.configure.nccl_env import nccl_env_for
from gpufleet.configure.runner import AnsibleConfigurator, Verdict

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

OS = "ubuntu-22.04"
CANARY = "gpufleet-canary-7f3a9c1e5b2d4086-munge-key"


@pytest.fixture(scope="module")
def applied(base_rootfs, collections_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chroot-node")
    bom = load_bom()
    ov = Overlay([base_rootfs], tmp)
    try:
        root = ov.root
        install_into(root, bom, OS, tmp)
        (root / "srv/canary-secret.b64").write_text(base64.b64encode(CANARY.encode()).decode() + "\n")
        for stub in ("nvidia-smi",):  # the driver package ships it; assert it came from there
            assert not (root / "usr/bin" / stub).exists()
        conf = AnsibleConfigurator(tmp / "state", collections=collections_dir)
        nodes = [Node(slot="chroot-n1", address=str(root), groups=("slurm",))]
        runs = converge(conf, nodes, local_site_vars(bom, OS), root, _snapshot)
        yield {"root": root, "bom": bom, "state": tmp / "state", **runs}
    finally:
        ov.close()


def _snapshot(root: Path) -> set[str]:
    paths = ("etc/nccl.conf", "etc/gpufleet", "etc/containerd", "etc/cdi", "etc/munge/munge.key",
             "opt/amazon", "etc/security/limits.d/90-gpufleet-efa.conf")
    return {p for p in paths if (root / p).exists()}


def test_check_mode_run_succeeds_and_writes_nothing(applied):
    r = applied["check"].hosts["chroot-n1"]
    assert r.verdict is Verdict.OK, r
    assert not applied["check_touched"]


def test_first_run_applies_every_role(applied):
    r = applied["first"].hosts["chroot-n1"]
    assert r.verdict is Verdict.OK, r
    assert r.changed, "a first run on a bare rootfs must change something"


def test_second_run_changes_nothing(applied):
    r = applied["second"].hosts["chroot-n1"]
    assert r.verdict is Verdict.OK, r
    assert r.changed == (), f"not idempotent: {r.changed}"


def test_packages_installed_at_pinned_versions_and_held(applied):
    root, bom = applied["root"], applied["bom"]
    v = bom.component_versions(OS)
    listing = chroot(root, "dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n")
    installed = {line.split()[0]: line.split()[1] for line in listing.splitlines()
                 if line.split()[2] in ("ii", "hi")}
    assert installed["nvidia-driver-570-open"] == f"{v['nvidia_driver']}-0ubuntu1"  # not the 570.999 decoy
    assert installed["nvidia-fabricmanager-570"].startswith(v["fabric_manager"])  # p5 is an NVSwitch SKU
    assert installed["libnccl2"].startswith(v["nccl"] + "-")
    assert installed["libnccl-dev"] == installed["libnccl2"]  # nccl-tests builds against the pinned headers
    assert installed["datacenter-gpu-manager-4-core"] == f"1:{v['dcgm']}-1"
    assert installed["nvidia-container-toolkit"].startswith(v["nvidia_container_toolkit"])
    assert installed["lustre-client-utils"].startswith(v["lustre_client"])
    holds = {l.split()[0] for l in chroot(root, "dpkg", "--get-selections").splitlines() if l.split()[1] == "hold"}
    for pkg in ("nvidia-driver-570-open", "nvidia-fabricmanager-570", "cuda-toolkit-12-8", "libnccl2", "libnccl-dev",
                "datacenter-gpu-manager-4-core", "containerd", "nvidia-container-toolkit",
                "lustre-client-utils", "libgdrapi"):
        assert pkg in holds, f"{pkg} not held"


def test_the_booted_kernel_is_held(applied):
    """node-config-review F12: the kernel-matched modules (Lustre, DKMS) need the kernel they were
    built for; the rolling linux-aws meta and unattended-upgrades would boot another."""
    import os

    root = applied["root"]
    holds = {x.split()[0] for x in chroot(root, "dpkg", "--get-selections").splitlines() if x.split()[1] == "hold"}
    assert {f"linux-image-{os.uname().release}", "linux-aws"} <= holds
    blacklist = (root / "etc/apt/apt.conf.d/51gpufleet-kernel-hold").read_text()
    assert 'Unattended-Upgrade::Package-Blacklist { "linux-"; };' in blacklist


def test_dkms_builds_with_the_kernels_compiler(applied):
    """node-config-review F10: Ubuntu 22.04's 6.8 AWS kernel is built with gcc-12, jammy's cc is gcc-11."""
    root = applied["root"]
    assert "export CC=gcc-12" in (root / "etc/dkms/framework.conf").read_text()
    status = chroot(root, "dpkg-query", "-W", "-f", "${Status}", "gcc-12")
    assert status.endswith("installed")


def test_persistence_mode_is_on_with_ubuntus_persistenced(applied):
    """node-config-review M3: Ubuntu's packaged unit runs --no-persistence-mode, StopWhenUnneeded=true."""
    override = (applied["root"] / "etc/systemd/system/nvidia-persistenced.service.d/"
                "gpufleet-persistence-mode.conf").read_text()
    assert "ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode" in override
    assert "--no-persistence-mode" not in override and "StopWhenUnneeded=false" in override


def test_rendered_configuration(applied):
    root, bom = applied["root"], applied["bom"]
    env = nccl_env_for(bom)
    conf_lines = [l for l in (root / "etc/nccl.conf").read_text().splitlines() if not l.startswith("#")]
    assert conf_lines == [f"{k}={v}" for k, v in env.nccl_conf.items()]
    env_text = (root / "etc/gpufleet/nccl.env").read_text()
    assert bom.digest() in env_text
    assert [l for l in env_text.splitlines() if not l.startswith("#")] == [f"{k}={v}" for k, v in env.job_env.items()]
    assert "FI_EFA_USE_DEVICE_RDMA" not in env_text and "FI_PROVIDER" not in env_text
    assert "memlock    unlimited" in (root / "etc/security/limits.d/90-gpufleet-efa.conf").read_text()
    memlock = (root / "etc/systemd/system/slurmd.service.d/gpufleet-efa-memlock.conf").read_text()
    assert "[Service]\nLimitMEMLOCK=infinity\n" in memlock  # PAM limits never reach slurmd (M7)
    assert (root / "etc/modules-load.d/gpufleet-efa.conf").read_text() == "efa\n"
    # the plugin's directories on the loader path (node-config-review F4): deb multiarch, rpm lib64 and lib
    ld_dirs = [x for x in (root / "etc/ld.so.conf.d/gpufleet-aws-ofi-nccl.conf").read_text().splitlines()
               if not x.startswith("#")]
    assert ld_dirs == ["/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "/opt/amazon/ofi-nccl/lib64",
                       "/opt/amazon/ofi-nccl/lib"]
    assert 'default_runtime_name = "nvidia"' in (root / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert "kind: nvidia.com/gpu" in (root / "etc/cdi/nvidia.yaml").read_text()
    fstab = [l for l in (root / "etc/fstab").read_text().splitlines() if " lustre " in l]
    assert fstab == [f"{FSX.dns_name}@tcp:/{FSX.mount_name} /fsx lustre "
                     "defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target 0 0"]
    assert (root / "fsx").is_dir()
    key = root / "etc/munge/munge.key"
    assert key.read_text() == CANARY and oct(key.stat().st_mode & 0o777) == "0o600"


def test_node_facts_report_installed_versions(applied):
    root, bom = applied["root"], applied["bom"]
    fact = json.loads(chroot(root, "/etc/ansible/facts.d/gpufleet.fact"))
    want = bom.component_versions(OS)
    got = fact["versions"]
    assert set(got) == set(want)
    for key in set(want) - {"kernel", "kubelet", "slurm"}:
        assert got[key] == want[key], key
    assert got["kubelet"] is None and got["slurm"] is None  # not installed in this rootfs
    assert fact["inventory"]["gpu_count"] == 8
    assert fact["inventory"]["gpu_models"] == ["NVIDIA H100 80GB HBM3"]


def _events(run):
    for path in sorted((run.private_data_dir / "artifacts" / "run" / "job_events").glob("*.json")):
        yield json.loads(path.read_text())


def test_node_facts_reach_ansible(applied):
    want = applied["bom"].component_versions(OS)
    [res] = [e["event_data"]["res"] for e in _events(applied["first"])
             if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == "Report installed versions"]
    got = res["ansible_local.gpufleet.versions"]
    assert got["nvidia_driver"] == want["nvidia_driver"] and got["libfabric"] == want["libfabric"]
    assert got["efa_installer"] == want["efa_installer"] and got["aws_ofi_nccl"] == want["aws_ofi_nccl"]


def test_canary_secret_in_no_runner_artifact(applied):
    # the task that touches the secret is no_log: its result is censored in every run
    censored = [e for e in _events(applied["first"])
                if e["event_data"].get("task") == "Install the munge key from Secrets Manager"
                and e.get("event") == "runner_on_ok"]
    assert censored and all(e["event_data"]["res"].get("censored") for e in censored)
    needles = [CANARY.encode(), base64.b64encode(CANARY.encode())]
    scanned = 0
    for path in Path(applied["state"]).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            scanned += 1
            assert not any(n in data for n in needles), f"secret leaked into {path}"
    assert scanned > 20  # job events of three runs were really there to scan
