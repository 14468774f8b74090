"""What the vendors ship together, as published: one row per release, each with its source and date.

Why: a BOM must pin versions a vendor really ships together. The EFA installer alone installs
libfabric, rdma-core, the efa kernel module, efa-nv-peermem and the aws-ofi-nccl plugin
(`libnccl-ofi`); pinning any of them apart from the installer release that carries it describes a
node that cannot exist (the BOM once pinned installer 1.41.0 with libfabric 2.1.0amzn3.0 and
aws-ofi-nccl 1.16.0: 1.41.0 ships 2.1.0amzn2.0 and 1.14.2, and no installer ever bundled 1.16.0).
`gpufleet.bom.check_compatibility` reads these tables; the rows are the vendors' data, never a
copy of our BOM. A value the release notes carry forward from an earlier release says so in `note`.
"""

from __future__ import annotations

from dataclasses import dataclass

EFA_CHANGELOG = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-changelog.html"
PCLUSTER_EFA_1_41 = "https://github.com/aws/aws-parallelcluster-cookbook/pull/2953"
PCLUSTER_EFA_1_43_2 = "https://github.com/aws/aws-parallelcluster-cookbook/pull/3012"


@dataclass(frozen=True)
class EfaInstallerRelease:
    """What one aws-efa-installer release installs (its release-notes row)."""

    version: str
    date: str  # release date, ISO
    libfabric: str
    aws_ofi_nccl: str  # the libnccl-ofi package the installer bundles
    rdma_core: str
    efa_kmod: str
    efa_nv_peermem: str | None
    sources: tuple[str, ...]
    note: str = ""
    # package version-release of the other packages the release installs (ParallelCluster's
    # per-release lists: the same in 1.41.0, 1.42.0 and 1.43.2, so carried between them)
    efa_config: str = "1.18-1"
    efa_profile: str = "1.7-1"
    openmpi40: str = "4.1.7-2"
    openmpi50: str = "5.0.6-11"


EFA_INSTALLER: dict[str, EfaInstallerRelease] = {r.version: r for r in (
    EfaInstallerRelease(
        "1.41.0", "2025-05-16", libfabric="2.1.0amzn2.0", aws_ofi_nccl="1.14.2", rdma_core="57.amzn0",
        efa_kmod="2.15.0", efa_nv_peermem=None, sources=(EFA_CHANGELOG, PCLUSTER_EFA_1_41),
        note="1.41.0 only upgrades rdma-core: libfabric 2.1.0amzn2.0 and libnccl-ofi 1.14.2 are 1.40.0's; the efa "
             "module (efa-2.15.0-1) as ParallelCluster lists the release's packages; efa-nv-peermem not listed"),
    EfaInstallerRelease(
        "1.42.0", "2025-06-06", libfabric="2.1.0amzn3.0", aws_ofi_nccl="1.15.0", rdma_core="57.amzn1",
        efa_kmod="2.15.3", efa_nv_peermem="1.2.1", sources=(EFA_CHANGELOG,)),
    EfaInstallerRelease(
        "1.43.0", "2025-07-25", libfabric="2.1.0amzn4.0", aws_ofi_nccl="1.16.1", rdma_core="58.amzn0",
        efa_kmod="2.17.2", efa_nv_peermem="1.2.2", sources=(EFA_CHANGELOG,)),
    EfaInstallerRelease(
        "1.43.1", "2025-07-31", libfabric="2.1.0amzn5.0", aws_ofi_nccl="1.16.2", rdma_core="58.amzn0",
        efa_kmod="2.17.2", efa_nv_peermem="1.2.2", sources=(EFA_CHANGELOG,),
        note="rdma-core, efa and efa-nv-peermem carried from 1.43.0"),
    EfaInstallerRelease(
        "1.43.2", "2025-08-15", libfabric="2.1.0amzn5.0", aws_ofi_nccl="1.16.3", rdma_core="58.amzn0",
        efa_kmod="2.17.2", efa_nv_peermem="1.2.2", sources=(EFA_CHANGELOG, PCLUSTER_EFA_1_43_2),
        note="only libnccl-ofi changes; ParallelCluster 3.14 ships it with driver 570.172.08 and Slurm 24.11.6 "
             "(libfabric-aws-2.1.0-5, rdma-core-58.0-1, efa-2.17.2-1)"),
)}


@dataclass(frozen=True)
class DriverBranch:
    """An NVIDIA datacenter driver branch: the CUDA level it carries and its package names."""

    branch: str
    cuda: str  # the CUDA minor release the branch's drivers support natively
    fabric_manager_apt: str  # Ubuntu (CUDA repo); version pinned as =<driver>-*
    fabric_manager_dnf: str  # RHEL family / Amazon Linux 2023 (CUDA repo); -<driver> appended
    nscq_apt: str
    sources: tuple[str, ...]
    date: str  # when the row was checked against its sources


CUDA_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"
EKS_AMI_DRIVER = ("https://github.com/awslabs/amazon-eks-ami/blob/main/templates/al2023/provisioners/"
                  "install-nvidia-driver.sh")
FM_GUIDE = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"

DRIVER_BRANCHES: dict[str, DriverBranch] = {b.branch: b for b in (
    DriverBranch("570", "12.8", "nvidia-fabricmanager-570", "nvidia-fabric-manager", "libnvidia-nscq-570",
                 (CUDA_NOTES, FM_GUIDE, EKS_AMI_DRIVER), "2025-08-15"),
    DriverBranch("575", "12.9", "nvidia-fabricmanager-575", "nvidia-fabric-manager", "libnvidia-nscq-575",
                 (CUDA_NOTES, FM_GUIDE, EKS_AMI_DRIVER), "2025-08-15"),
    # "versions before 580 used to have a dash" (amazon-eks-ami install-nvidia-driver.sh)
    DriverBranch("580", "13.0", "nvidia-fabricmanager-580", "nvidia-fabricmanager", "libnvidia-nscq-580",
                 (CUDA_NOTES, FM_GUIDE, EKS_AMI_DRIVER), "2025-08-15"),
)}

DCGM_INSTALL = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/getting-started.html"


@dataclass(frozen=True)
class DcgmPackages:
    """DCGM 4's packages for one CUDA major: the core and the CUDA-specific part."""

    cuda_major: str
    core: str
    cuda: str
    source: str
    date: str


DCGM_4: dict[str, DcgmPackages] = {p.cuda_major: p for p in (
    DcgmPackages("11", "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda11", DCGM_INSTALL, "2025-08-15"),
    DcgmPackages("12", "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12", DCGM_INSTALL, "2025-08-15"),
)}

FSX_CLIENT = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html"


@dataclass(frozen=True)
class LustreClient:
    """The Lustre client series FSx publishes for one node OS and kernel family."""

    os: str
    kernel: str
    lustre: str
    source: str
    date: str


LUSTRE_CLIENTS: tuple[LustreClient, ...] = (
    LustreClient("al2023", "6.1", "2.15", FSX_CLIENT, "2025-08-15"),
    LustreClient("al2023", "6.12", "2.15", FSX_CLIENT, "2025-08-15"),
    LustreClient("ubuntu-22.04", "5.15", "2.15", FSX_CLIENT, "2025-08-15"),
    LustreClient("ubuntu-22.04", "6.8", "2.15", FSX_CLIENT, "2025-08-15"),
    LustreClient("ubuntu-24.04", "6.8", "2.15", FSX_CLIENT, "2025-08-15"),
    LustreClient("ubuntu-24.04", "6.14", "2.15", FSX_CLIENT, "2025-08-15"),
)


def lustre_series(os: str, kernel_family: str) -> set[str]:
    """The Lustre client series FSx ships for `os` on `kernel_family` (empty: none)."""
    return {r.lustre for r in LUSTRE_CLIENTS if r.os == os and r.kernel == kernel_family}


# --- what a node with these releases reports (the shape of the tools' own output) -------------

def fi_info_version(installer: str) -> str:
    """`fi_info --version` on a node where EFA installer `installer` ran (libfabric's own format)."""
    lib = EFA_INSTALLER[installer].libfabric
    return f"/opt/amazon/efa/bin/fi_info: {lib}\nlibfabric: {lib}\nlibfabric api: 2.1\n"


# rdma-core's binary packages as its own packaging names them (debian/control; redhat/rdma-core.spec)
RDMA_CORE_DEB = ("ibacm", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "libibmad5",
                 "libibnetdisc5", "libibumad3", "libibverbs1", "librdmacm1", "rdma-core")
RDMA_CORE_RPM = ("ibacm", "infiniband-diags", "libibumad", "libibverbs", "libibverbs-utils", "librdmacm",
                 "rdma-core")


def efa_installed_packages(installer: str, family: str = "deb") -> str:
    """`/opt/amazon/efa_installed_packages` as the installer writes it: the version line the gates
    read, then every package of the release row (rdma-core's, libfabric's, libnccl-ofi, Open MPI 4
    and 5, efa-config, efa-profile, efa-nv-peermem and the efa driver), named as the distribution's
    packages (`deb`: name_version[_arch]; `rpm`: name-version-release on Amazon Linux 2023)."""
    r = EFA_INSTALLER[installer]
    if family == "deb":
        packages = [f"{n}_{r.rdma_core}-1" for n in RDMA_CORE_DEB]
        packages += [f"libfabric-aws-bin_{r.libfabric}_amd64", f"libfabric-aws-dev_{r.libfabric}_amd64",
                     f"libfabric1-aws_{r.libfabric}_amd64", f"libnccl-ofi_{r.aws_ofi_nccl}-1_amd64",
                     f"openmpi40-aws_{r.openmpi40}", f"openmpi50-aws_{r.openmpi50}",
                     f"efa-config_{r.efa_config}_all", f"efa-profile_{r.efa_profile}_all", f"efa_{r.efa_kmod}-1"]
        packages += [f"efa-nv-peermem_{r.efa_nv_peermem}-1"] if r.efa_nv_peermem else []
    elif family == "rpm":
        dist = "amzn2023"
        packages = [f"{n}-{r.rdma_core}-1.{dist}" for n in RDMA_CORE_RPM]
        packages += [f"libfabric-aws-{r.libfabric}-1.{dist}", f"libfabric-aws-devel-{r.libfabric}-1.{dist}",
                     f"libnccl-ofi-{r.aws_ofi_nccl}-1.{dist}", f"openmpi40-aws-{r.openmpi40}",
                     f"openmpi50-aws-{r.openmpi50}", f"efa-config-{r.efa_config}.{dist}",
                     f"efa-profile-{r.efa_profile}.{dist}", f"efa-{r.efa_kmod}-1.{dist}"]
        packages += [f"efa-nv-peermem-{r.efa_nv_peermem}-1.{dist}"] if r.efa_nv_peermem else []
    else:
        raise ValueError(f"package family {family!r}: deb or rpm")
    return (f"# EFA installer version: {r.version}\n# Debug packages installed: no\n# Packages installed:\n"
            + " ".join(packages) + "\n")


def fi_info_stub(installer: str) -> str:
    """A stub `fi_info` for chroot tests: answers --version as libfabric of `installer`'s row does."""
    return ("#!/bin/sh\n# Stub of libfabric's fi_info for chroot tests (format of `fi_info --version`), generated\n"
            f"# from gpufleet.vendor_releases.EFA_INSTALLER[{installer!r}].\n"
            '[ "$1" = "--version" ] || { echo "stub fi_info: only --version" >&2; exit 2; }\n'
            "cat <<'OUT'\n" + fi_info_version(installer) + "OUT\n")
