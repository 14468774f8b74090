"""Each compatibility rule (images/compat.yaml and the vendors' release rows in
gpufleet.vendor_releases): one passing and one rejected case."""

from __future__ import annotations

import copy

import pytest

import re

from gpufleet import vendor_releases as vendor
from gpufleet.bom import Bom, check_compatibility, load_bom, load_compat

RULES = load_compat()
BASE = load_bom().model_dump(by_alias=True)




def codes(bom: Bom, os_name: str = "ubuntu-22.04") -> list[str]:
    return [f.code for f in check_compatibility(bom, os_name, RULES)]


@pytest.mark.parametrize("os_name", ["al2023", "ubuntu-22.04", "ubuntu-24.04"])
def test_shipped_bom_passes_every_rule(os_name):
    assert check_compatibility(load_bom(), os_name, RULES) == []


REJECTED = [
    (dict(components__nvidia_driver__branch="580"), "BOM_DRIVER_BRANCH", "bom.nvidia_driver.version"),
    (dict(components__fabric_manager__version="570.158.01"), "BOM_FABRIC_MANAGER_MISMATCH", "bom.fabric_manager.version"),
    (dict(components__cuda__version="12.9.1"), "BOM_CUDA_DRIVER", "bom.nvidia_driver.version"),
    (dict(components__cuda__version="12.7.0"), "BOM_CUDA_UNKNOWN", "bom.cuda.version"),
    (dict(components__nccl__version="2.28.3"), "BOM_NCCL_RANGE", "bom.nccl.version"),
    (dict(components__nccl__version="2.16.5"), "BOM_NCCL_RANGE", "bom.nccl.version"),
    (dict(components__efa_installer__libfabric="2.1.0amzn4.0"), "BOM_EFA_LIBFABRIC", "bom.efa_installer.libfabric"),
    (dict(components__efa_installer={"version": "1.40.0", "libfabric": "2.1.0amzn5.0"}), "BOM_EFA_UNKNOWN",
     "bom.efa_installer.version"),
    (dict(components__efa_installer={"version": "1.43.1", "libfabric": "2.1.0amzn5.0"}), "BOM_EFA_OFI_NCCL",
     "bom.aws_ofi_nccl.version"),
    (dict(components__nvidia_driver={"branch": "590", "version": "590.48.01", "kernel_modules": "open"},
          components__fabric_manager__version="590.48.01"), "BOM_DRIVER_BRANCH_UNKNOWN", "bom.nvidia_driver.branch"),
    (dict(components__nvidia_driver={"branch": "580", "version": "580.65.06", "kernel_modules": "open"},
          components__fabric_manager__version="580.65.06", components__cuda__version="13.0.0"),
     "BOM_DCGM_CUDA", "bom.dcgm.version"),
    (dict(os__ubuntu_2204__kernel={"family": "6.5", "minimum": "6.5.0-1024-aws"}), "BOM_LUSTRE_KERNEL",
     "bom.os.ubuntu-22.04.kernel.family"),
    (dict(os__ubuntu_2204__lustre_client="2.12.8"), "BOM_LUSTRE_CLIENT", "bom.os.ubuntu-22.04.lustre_client"),
    (dict(os__ubuntu_2204__kernel={"family": "6.8", "minimum": "5.15.0-1080-aws"}), "BOM_KERNEL_FAMILY",
     "bom.os.ubuntu-22.04.kernel.minimum"),
]


def _apply(changes: dict) -> Bom:
    raw = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, leaf = dotted.replace("ubuntu_2204", "ubuntu-22.04").split("__")
        node = raw
        for p in parents:
            node = node[p]
        node[leaf] = value
    return Bom.model_validate(raw)


@pytest.mark.parametrize("changes", [
    dict(components__cuda__version="12.4.1"),
    dict(components__nvidia_driver__branch="570", components__nvidia_driver__version="570.195.03",
         components__fabric_manager__version="570.195.03"),
    dict(components__nccl__version="2.17.1"),
    dict(components__nccl__version="2.27.5"),
    dict(components__nccl__version="2.27.7"),
    dict(os__ubuntu_2204__kernel={"family": "5.15", "minimum": "5.15.0-1080-aws"}),
], ids=["older-cuda", "driver-on-branch", "nccl-min", "nccl-2.27.5", "nccl-max", "kernel-5.15"])
def test_passing_variants(changes):
    assert codes(_apply(changes)) == []


@pytest.mark.parametrize("changes,code,field", REJECTED, ids=[c for _, c, _ in REJECTED])
def test_rejected_variants(changes, code, field):
    findings = check_compatibility(_apply(changes), "ubuntu-22.04", RULES)
    assert [(f.code, f.field) for f in findings] == [(code, field)]
    assert all(f.level.value == "ERROR" for f in findings)


def test_os_without_pins_is_an_error():
    raw = copy.deepcopy(BASE)
    del raw["os"]["al2023"]
    assert codes(Bom.model_validate(raw), "al2023") == ["BOM_OS_MISSING"]


def test_every_rule_cites_a_source():
    for name in ("cuda_minimum_driver", "aws_ofi_nccl", "fabric_manager_matches_driver"):
        assert "http" in getattr(RULES, name).source


# --- the vendors' release sets ---------------------------------------------------------------

def test_the_old_bom_pairs_versions_no_vendor_ships():
    """EFA installer 1.41.0 ships libfabric 2.1.0amzn2.0 and libnccl-ofi 1.14.2; no installer bundled 1.16.0."""
    old = _apply(dict(components__efa_installer={"version": "1.41.0", "libfabric": "2.1.0amzn3.0"},
                      components__aws_ofi_nccl__version="1.16.0", components__nccl__version="2.27.5"))
    findings = {f.code: f.message for f in check_compatibility(old, "ubuntu-22.04", RULES)}
    assert set(findings) == {"BOM_EFA_LIBFABRIC", "BOM_EFA_OFI_NCCL"}
    assert "ships libfabric 2.1.0amzn2.0" in findings["BOM_EFA_LIBFABRIC"]
    assert "installs aws-ofi-nccl (libnccl-ofi) 1.14.2" in findings["BOM_EFA_OFI_NCCL"]
    assert "no installer bundles" in findings["BOM_EFA_OFI_NCCL"] and vendor.EFA_CHANGELOG in findings["BOM_EFA_OFI_NCCL"]


def test_the_shipped_bom_is_the_parallelcluster_set():
    """ParallelCluster 3.14's set (aws-parallelcluster-cookbook#3012): driver 570.172.08, EFA 1.43.2 with
    libfabric 2.1.0amzn5.0 and aws-ofi-nccl 1.16.3, Slurm 24.11.6."""
    bom = load_bom()
    c = bom.components
    assert (c.nvidia_driver.version, c.efa_installer.version, c.efa_installer.libfabric, c.aws_ofi_nccl.version) == (
        "570.172.08", "1.43.2", "2.1.0amzn5.0", "1.16.3")
    assert {o.slurm for o in bom.os.values()} == {"24.11.6"}
    row = vendor.EFA_INSTALLER["1.43.2"]
    assert (row.libfabric, row.aws_ofi_nccl) == (c.efa_installer.libfabric, c.aws_ofi_nccl.version)
    assert vendor.PCLUSTER_EFA_1_43_2 in row.sources


@pytest.mark.parametrize("installer", sorted(vendor.EFA_INSTALLER))
def test_each_installer_release_paired_as_published_passes(installer):
    """A BOM that takes an installer row's own libfabric and plugin passes the vendor rules (NCCL and
    the plugin's range are compat.yaml's business: only plugins it knows are tried)."""
    row = vendor.EFA_INSTALLER[installer]
    bom = _apply(dict(components__efa_installer={"version": installer, "libfabric": row.libfabric},
                      components__aws_ofi_nccl__version=row.aws_ofi_nccl))
    vendor_codes = {"BOM_EFA_LIBFABRIC", "BOM_EFA_OFI_NCCL", "BOM_EFA_UNKNOWN"}
    assert vendor_codes.isdisjoint(codes(bom))


def test_every_vendor_row_has_a_source_and_a_date():
    rows = [*vendor.EFA_INSTALLER.values(), *vendor.DRIVER_BRANCHES.values(), *vendor.DCGM_4.values(),
            *vendor.LUSTRE_CLIENTS]
    for row in rows:
        sources = getattr(row, "sources", None) or (row.source,)
        assert all(s.startswith("https://") for s in sources), row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row.date), row


def test_the_generated_node_outputs_follow_the_release_rows():
    """What a stub of a node's tools prints comes from the vendor row, never from the BOM."""
    text = vendor.fi_info_version("1.41.0")
    assert "libfabric: 2.1.0amzn2.0" in text.splitlines()
    manifest = vendor.efa_installed_packages("1.43.2")
    assert manifest.startswith("# EFA installer version: 1.43.2\n")
    assert "libnccl-ofi_1.16.3-1_amd64" in manifest.split() and "libfabric1-aws_2.1.0amzn5.0_amd64" in manifest.split()
    # every package ParallelCluster 3.14 lists for 1.43.2 (PR #3012), not only the ones the BOM pins
    for package in ("efa_2.17.2-1", "efa-config_1.18-1_all", "efa-profile_1.7-1_all", "openmpi40-aws_4.1.7-2",
                    "openmpi50-aws_5.0.6-11", "rdma-core_58.amzn0-1", "ibverbs-providers_58.amzn0-1"):
        assert package in manifest.split(), package
    rpm = vendor.efa_installed_packages("1.43.2", "rpm").split()
    assert {"efa-2.17.2-1.amzn2023", "libfabric-aws-2.1.0amzn5.0-1.amzn2023", "openmpi50-aws-5.0.6-11",
            "libibverbs-58.amzn0-1.amzn2023"} <= set(rpm)


def test_the_chroot_stubs_are_the_vendor_rows_of_the_boms_installer():
    """The role tests' fake EFA installer lays down these files: they are the vendor row of the
    installer the BOM pins, never hand-written to the BOM (regenerate with vendor_releases.fi_info_stub
    and efa_installed_packages when the pin moves)."""
    from pathlib import Path

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "configure"
    installer = BASE["components"]["efa_installer"]["version"]
    assert (fixtures / "fi_info").read_text() == vendor.fi_info_stub(installer)
    assert (fixtures / "efa_installed_packages").read_text() == vendor.efa_installed_packages(installer, "deb")
    assert (fixtures / "rpm" / "efa_installed_packages").read_text() == vendor.efa_installed_packages(installer, "rpm")
