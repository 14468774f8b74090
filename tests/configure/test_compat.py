"""Each compatibility rule in images/compat.yaml: one passing and one rejected case."""

from __future__ import annotations

import copy

import pytest

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
    (dict(components__aws_ofi_nccl__version="1.15.0"), "BOM_OFI_UNKNOWN", "bom.aws_ofi_nccl.version"),
    (dict(components__efa_installer={"version": "1.22.0", "libfabric": "1.17.0"}), "BOM_OFI_LIBFABRIC",
     "bom.efa_installer.libfabric"),
    (dict(components__efa_installer__libfabric="2.1.0amzn4.0"), "BOM_EFA_LIBFABRIC", "bom.efa_installer.libfabric"),
    (dict(components__efa_installer__version="1.40.0"), "BOM_EFA_UNKNOWN", "bom.efa_installer.version"),
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
    dict(components__aws_ofi_nccl__version="1.16.3", components__nccl__version="2.27.7"),
    dict(components__aws_ofi_nccl__version="1.19.0", components__nccl__version="2.29.7"),
    dict(os__ubuntu_2204__kernel={"family": "5.15", "minimum": "5.15.0-1080-aws"}),
], ids=["older-cuda", "driver-on-branch", "nccl-min", "nccl-max", "ofi-1.16.3", "ofi-1.19.0", "kernel-5.15"])
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
    for name in ("cuda_minimum_driver", "aws_ofi_nccl", "efa_installer_libfabric",
                 "fabric_manager_matches_driver", "lustre_client_kernel"):
        assert "http" in getattr(RULES, name).source
