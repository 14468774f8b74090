"""Roles on the dnf family against what the node's image and repositories really hold, for real in the
AL2023 look-alike (rpm_fixture_repo.py):

- F9 (node-config-review): on an image that ships the driver stack (the EKS AL2023 NVIDIA AMI, known by
  its /etc/eks/nvidia-kmod-load.sh) the driver, EFA and container roles verify the image's versions
  against the BOM and install no second driver, switch no module stream (the task would fail here: the
  local repositories have no module metadata), re-run no EFA installer; a --check --diff run changes
  nothing and a second run nothing. A driver, EFA installer or toolkit that differs fails naming the
  BOM field and the image's version.
- M10: GDRCopy is installed after the driver in its own transaction: a CUDA repository without GDRCopy
  fails that task, with the driver installed.
- M11: enroot's rpm requires GNU parallel, which AL2023 does not carry: without a source the role fails
  naming it; with `enroot_parallel_rpm_url` it installs enroot with its distribution dependencies.

A root cannot run `modinfo` against a kernel of its own: a stub prints the image's nvidia module version.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from configure_host import PROJECT_ROOT, Overlay, chroot, require_root
from gpufleet.bom import load_bom
from gpufleet.configure.extravars import LustreMount
from gpufleet.configure.inventory import ChrootConnection, Node
from gpufleet.configure.runner import AnsibleConfigurator, RunResult, Verdict
from node_stubs import STUB_DATA, install_tool
from rpm_fixture_repo import DIST, REPO_IN_ROOT, Rpm, build_rpm, install_into, local_site_vars

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

OS = "al2023"
HOST = "eks-image-n1"
FSX = LustreMount("fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com", "hgfedcba", "/fsx")
MODINFO = f"""
[ "$*" = "-F version nvidia" ] && [ -s /{STUB_DATA}/nvidia-version ] && exec cat /{STUB_DATA}/nvidia-version
echo "modinfo: ERROR: Module $3 not found." >&2
exit 1
"""
ENROOT_DEPS = ("bash", "curl", "gawk", "jq", "shadow-utils", "squashfs-tools", "zstd", "libcap")
DRIVER_RPMS = ("nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced", "kmod-nvidia-open-dkms",
               "nvidia-fabric-manager")


def _rpms(root: Path) -> dict[str, str]:
    out = chroot(root, "rpm", "-qa", "--qf", "%{NAME} %{VERSION}\n")
    return dict(line.split() for line in out.splitlines())


def _playbook(dir_: Path, name: str, roles: tuple[str, ...]) -> None:
    (dir_ / name).write_text("---\n- name: Roles under test\n  hosts: gpu\n  gather_facts: true\n  roles:\n"
                             + "".join(f"    - role: {r}\n" for r in roles))


def _rpm_requiring(name: str, version: str, requires: tuple[str, ...], out: Path, work: Path) -> Path:
    """A dummy noarch RPM with Requires (build_rpm writes none): enroot's packaging in miniature."""
    top = Path(tempfile.mkdtemp(prefix="rpmbuild-req-", dir=work))
    spec = "\n".join([f"Name: {name}", f"Version: {version}", "Release: 1.el8", f"Summary: dummy {name}",
                      "License: Apache-2.0", "BuildArch: noarch", "AutoReqProv: no",
                      *[f"Requires: {r}" for r in requires], "%description", f"dummy {name}", "%files", ""])
    (top / "pkg.spec").write_text(spec)
    subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", "--define", f"_rpmdir {top / 'out'}",
                    "--define", "_build_name_fmt %%{NAME}.rpm", "--define", "_dbpath /nonexistent",
                    str(top / "pkg.spec")], check=True, capture_output=True)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}-{version}-1.el8.x86_64.rpm"  # the name the release publishes (enroot/vars)
    shutil.move(top / "out" / f"{name}.rpm", target)
    shutil.rmtree(top, ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def node(base_rootfs, dnf_layer, collections_dir, tmp_path_factory):
    require_root("an AL2023 look-alike chroot")
    tmp = tmp_path_factory.mktemp("eks-image")
    bom = load_bom()
    playbooks = tmp / "playbooks"
    playbooks.mkdir()
    (playbooks / "roles").symlink_to(PROJECT_ROOT / "playbooks" / "roles")
    _playbook(playbooks, "gpu-stack.yml", ("nvidia_driver", "efa", "container_runtime"))
    _playbook(playbooks, "driver.yml", ("nvidia_driver",))
    _playbook(playbooks, "enroot.yml", ("enroot",))
    ov = Overlay([dnf_layer, base_rootfs], tmp)
    try:
        root = ov.root
        urls = install_into(root, bom, OS, dnf_layer, tmp)
        install_tool(root, "/usr/local/sbin/modinfo", MODINFO)
        (root / STUB_DATA).mkdir(parents=True, exist_ok=True)
        conf = AnsibleConfigurator(tmp / "state", playbook_dir=playbooks, collections=collections_dir)
        base = local_site_vars(bom, OS, urls, FSX) | {
            # the stream F8 enables on a plain AL2023 node: no module metadata here, so enabling it fails
            "nvidia_driver_dnf_module_stream": "570-open"}

        def apply(playbook: str, run_id: str, check: bool = False, **more) -> RunResult:
            return conf.run([Node(slot=HOST, address=str(root))], ChrootConnection(), base | more,
                            playbook=playbook, run_id=run_id, check=check)

        yield {"root": root, "bom": bom, "apply": apply, "tmp": tmp}
    finally:
        ov.close()


def _make_eks_image(root: Path, bom) -> None:
    """What the EKS AL2023 NVIDIA AMI holds at the BOM's versions: its marker, its archived nvidia
    module, the EFA installer's record, containerd and the toolkit from their repositories."""
    (root / "etc/eks").mkdir(parents=True, exist_ok=True)
    (root / "etc/eks/nvidia-kmod-load.sh").write_text("#!/bin/sh\n")
    (root / STUB_DATA / "nvidia-version").write_text(bom.components.nvidia_driver.version + "\n")
    c = bom.components
    chroot(root, "dnf", "-y", "-q", "--repofrompath", f"ctk,file:///{REPO_IN_ROOT}/libnvidia-container/",
           "--repofrompath", f"cuda,file:///{REPO_IN_ROOT}/cuda/", "--nogpgcheck", "install",
           f"containerd-{bom.for_os(OS).containerd}", f"nvidia-fabric-manager-{c.fabric_manager.version}",
           *[f"{n}-{c.nvidia_container_toolkit.version}" for n in
             ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
              "libnvidia-container1")])
    (root / "opt/amazon").mkdir(parents=True, exist_ok=True)
    (root / "opt/amazon/efa_installed_packages").write_text(
        f"# EFA installer version: {c.efa_installer.version}\n# Debug packages installed: no\n")
    (root / "opt/amazon/efa/bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(PROJECT_ROOT / "tests/fixtures/configure/fi_info", root / "opt/amazon/efa/bin/fi_info")


def _failed(r, task: str):
    assert r.verdict is Verdict.FAILED, r
    assert r.task == task, r
    return r.message


def test_f9_the_eks_image_is_verified_not_layered(node):
    root, bom = node["root"], node["bom"]
    _make_eks_image(root, bom)
    before = _rpms(root)
    check = node["apply"]("gpu-stack.yml", "eks-check", check=True).hosts[HOST]
    assert check.verdict is Verdict.OK, check
    assert _rpms(root) == before
    first = node["apply"]("gpu-stack.yml", "eks-first").hosts[HOST]
    assert first.verdict is Verdict.OK, first
    rpms = _rpms(root)
    for name in DRIVER_RPMS[:-1]:
        assert name not in rpms, f"{name} installed over the image's driver"
    assert rpms["nvidia-fabric-manager"] == before["nvidia-fabric-manager"]
    # what the image does not ship still comes from the BOM: CUDA and GDRCopy
    assert rpms["cuda-toolkit-12-8"] == bom.components.cuda.version
    assert rpms["gdrcopy"] == rpms["gdrcopy-kmod"] == bom.components.gdrcopy.version
    assert "libnccl-ofi" not in rpms  # the EFA installer did not run over the image's
    assert not (root / "etc/dnf/modules.d/nvidia-driver.module").exists()
    second = node["apply"]("gpu-stack.yml", "eks-second").hosts[HOST]
    assert second.verdict is Verdict.OK, second
    assert second.changed == (), f"not idempotent: {second.changed}"


@pytest.mark.parametrize("what", ["driver", "efa", "toolkit"])
def test_f9_an_image_version_off_the_bom_fails_naming_the_field(node, what):
    root, bom = node["root"], node["bom"]
    _make_eks_image(root, bom)
    c = bom.components
    if what == "driver":
        (root / STUB_DATA / "nvidia-version").write_text("570.195.03\n")
        task, field, image = "Check the image's driver is the BOM's", "components.nvidia_driver.version", "570.195.03"
    elif what == "efa":
        (root / "opt/amazon/efa_installed_packages").write_text("# EFA installer version: 1.44.0\n")
        task, field, image = ("Check the image's EFA installer release is the BOM's",
                              "components.efa_installer.version", "1.44.0")
    else:
        chroot(root, "rpm", "-e", "--nodeps", "nvidia-container-toolkit")
        task, field, image = ("Check the image's containerd and toolkit are the BOM's",
                              "components.nvidia_container_toolkit.version", "none")
    try:
        msg = _failed(node["apply"]("gpu-stack.yml", f"eks-off-{what}").hosts[HOST], task)
    finally:
        (root / STUB_DATA / "nvidia-version").write_text(c.nvidia_driver.version + "\n")
    assert field in msg and image in msg, msg


def test_m10_gdrcopy_missing_from_the_cuda_repository_leaves_the_driver_installed(node):
    root, bom = node["root"], node["bom"]
    (root / "etc/eks/nvidia-kmod-load.sh").unlink(missing_ok=True)  # a plain AL2023 node: the role installs the driver
    assert "nvidia-driver" not in _rpms(root)
    # a GDRCopy pin the CUDA repository does not carry (what M10 feared of NVIDIA's repository)
    msg = _failed(node["apply"]("driver.yml", "no-gdrcopy", nvidia_driver_dnf_module_stream="",
                                nvidia_driver_gdrcopy_version="2.5.9").hosts[HOST],
                  "Install GDRCopy from the CUDA repository (dnf)")
    assert "gdrcopy-2.5.9" in msg, msg
    rpms = _rpms(root)
    assert rpms["nvidia-driver"] == bom.components.nvidia_driver.version  # its own transaction went through
    assert rpms["kmod-nvidia-open-dkms"] == bom.components.nvidia_driver.version
    assert rpms["cuda-toolkit-12-8"] == bom.components.cuda.version


def test_m11_enroot_needs_a_source_for_gnu_parallel(node):
    root, bom, tmp = node["root"], node["bom"], node["tmp"]
    version = bom.slurm_containers.enroot
    release = root / "srv/enroot-release"
    _rpm_requiring("enroot", version, ("parallel", "jq", "squashfs-tools", "gawk"), release, tmp)
    _rpm_requiring("enroot+caps", version, ("enroot", "libcap"), release, tmp)
    parallel = _rpm_requiring("parallel", "20240522", (), root / "srv/parallel", tmp)
    distro = root / REPO_IN_ROOT / "amazonlinux"
    for name in ENROOT_DEPS:  # what AL2023 carries of enroot's requirements; no parallel
        build_rpm(Rpm("amazonlinux", name, "1.0", f"1.{DIST}"), distro, tmp)
    subprocess.run(["createrepo_c", "--quiet", "--no-database", "--update", str(distro)], check=True,
                   capture_output=True)
    chroot(root, "dnf", "-q", "clean", "all")  # dnf caches even a local repository's old index
    (root / "etc/tmpfiles.d").mkdir(parents=True, exist_ok=True)  # systemd's, on every real node
    ev = {"enroot_version": version, "enroot_release_url": "file:///srv/enroot-release"}
    msg = _failed(node["apply"]("enroot.yml", "enroot-no-parallel", **ev).hosts[HOST],
                  "Fail naming the missing GNU parallel (dnf)")
    assert "enroot_parallel_rpm_url" in msg and "GNU parallel" in msg, msg
    assert "enroot" not in _rpms(root)

    ok = node["apply"]("enroot.yml", "enroot-parallel", **ev,
                       enroot_parallel_rpm_url=f"file:///srv/parallel/{parallel.name}").hosts[HOST]
    assert ok.verdict is Verdict.OK, ok
    rpms = _rpms(root)
    assert rpms["enroot"] == rpms["enroot+caps"] == version
    assert {"parallel", *ENROOT_DEPS} <= set(rpms)
