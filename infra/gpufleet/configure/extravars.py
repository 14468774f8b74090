"""Extravars for site.yml: the BOM's versions and the stack's choices, in role-prefixed names.

Nothing secret goes in here: nodes fetch secrets themselves with their instance role (the
munge role gets a Secrets Manager *id*, never a value). `check_no_secrets` is the guard.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from gpufleet import catalog
from gpufleet.bom import Bom
from gpufleet.configure.nccl_env import nccl_env_for
from gpufleet.errors import ConfigError


@dataclass(frozen=True)
class LustreMount:
    """What the storage component exports: FSx DNS name and Lustre mount name; `efa`: the file
    system is EFA-enabled (gpufleet:storage.efaEnabled), so clients configure LNet over EFA."""

    dns_name: str
    mount_name: str
    mount_path: str = "/fsx"
    efa: bool = False


# AWS's EFA client setup for FSx for Lustre (https://docs.aws.amazon.com/eks/latest/userguide/fsx-csi-tuning-efa.html):
# on p5/p5e (32 EFA devices) one efa NI on every 4th device, one per PCIe switch; on other instances the
# first and the last device (0: that rule).
LUSTRE_EFA_STRIDE = {"p5.48xlarge": 4, "p5e.48xlarge": 4}


def lustre_efa_extravars(instance: catalog.InstanceType) -> dict[str, Any]:
    """The lustre_client role's LNet-over-EFA inputs; an instance without EFA cannot be an EFA client."""
    if instance.efa_interfaces == 0:
        raise ConfigError(f"gpufleet:storage.efaEnabled: {instance.name} has no EFA interface, so its Lustre "
                          "client cannot use an EFA-enabled file system; expected an EFA instance type or "
                          "efaEnabled: false")
    return {"lustre_client_efa": True, "lustre_client_efa_stride": LUSTRE_EFA_STRIDE.get(instance.name, 0)}


EKS_NVIDIA_AMI_MARKERS = ("/aws/service/eks/optimized-ami/", "/amazon-linux-2023/", "/nvidia/")


def image_ships_gpu_stack(os_name: str, ami_id: str | None, ami_ssm_parameter: str | None) -> bool | None:
    """Whether the stack's image is the EKS-optimized AL2023 NVIDIA AMI, which ships the driver, the
    fabric manager, EFA and the container toolkit (the roles then verify them against the BOM and
    install no second copy: review F9). From the stack, not only from marker files on the node, which
    an AMI release may drop. True: an al2023 stack without `image.amiId` booting that parameter (the
    program's default on al2023); False: another parameter; None: a pinned AMI id, which only the
    node can tell (the roles look for the AMI's own files)."""
    if os_name != "al2023":
        return False
    if ami_id:
        return None
    return ami_ssm_parameter is None or all(m in ami_ssm_parameter for m in EKS_NVIDIA_AMI_MARKERS)


def configure_extravars(bom: Bom, os: str, instance: catalog.InstanceType, *,
                        lustre: LustreMount | None = None, munge_secret_id: str | None = None,
                        region: str | None = None, live: bool = True,
                        enable_services: bool = True, ships_gpu_stack: bool | None = None) -> dict[str, Any]:
    c = bom.components
    pins = bom.for_os(os)
    efa = instance.efa_interfaces > 0
    env = nccl_env_for(bom, efa=efa)
    out: dict[str, Any] = {
        "gpufleet_bom_name": bom.name,
        "gpufleet_bom_digest": bom.digest(),
        "gpufleet_live_system": live,
        "gpufleet_enable_services": enable_services,
        "nvidia_driver_branch": c.nvidia_driver.branch,
        "nvidia_driver_version": c.nvidia_driver.version,
        "nvidia_driver_kernel_modules": c.nvidia_driver.kernel_modules,
        "nvidia_driver_cuda_version": c.cuda.version,
        "nvidia_driver_gdrcopy_version": c.gdrcopy.version,
        "nvidia_driver_fabric_manager": instance.nvswitch,
        "efa_installer_version": c.efa_installer.version,
        "efa_libfabric_version": c.efa_installer.libfabric,
        "nccl_tuning_nccl_version": c.nccl.version,
        "nccl_tuning_cuda_version": c.cuda.version,
        "nccl_tuning_nccl_conf": env.nccl_conf,
        "nccl_tuning_job_env": env.job_env,
        "nccl_tuning_bom_digest": bom.digest(),
        "container_runtime_containerd_version": pins.containerd,
        "container_runtime_toolkit_version": c.nvidia_container_toolkit.version,
        "container_runtime_write_containerd_config": os != "al2023",  # nodeadm owns it on EKS AL2023
        "lustre_client_version": pins.lustre_client,
        "slurm_version": pins.slurm,
        "dcgm_version": c.dcgm.version,
        "dcgm_cuda_version": c.cuda.version,
    }
    if lustre:
        out |= {"lustre_client_fs_dns": lustre.dns_name, "lustre_client_mount_name": lustre.mount_name,
                "lustre_client_mount_path": lustre.mount_path}
        if lustre.efa:
            out |= lustre_efa_extravars(instance)
    if ships_gpu_stack is not None:  # else the roles look at the node (nvidia_driver_image_markers)
        out["gpufleet_image_ships_gpu_stack"] = ships_gpu_stack
    if munge_secret_id:
        out |= {"munge_key_secret_id": munge_secret_id, "munge_key_region": region or ""}
    if bom.slurm_containers is not None:  # roles enroot and pyxis (Slurm nodes of a stack with a workload image)
        out |= {"enroot_version": bom.slurm_containers.enroot, "pyxis_version": bom.slurm_containers.pyxis}
    check_no_secrets(out)
    return out


_SECRET_KEY = re.compile(r"(password|passwd|token|private_key|secret(?!_id)|munge_key$)", re.I)
_SECRET_VALUE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|AKIA[0-9A-Z]{16}")


def check_no_secrets(extravars: Mapping[str, Any]) -> None:
    """Refuse extravars that look like they carry a secret (DESIGN: secrets never pass here)."""
    for key, value in extravars.items():
        if _SECRET_KEY.search(key) or (isinstance(value, str) and _SECRET_VALUE.search(value)):
            raise ConfigError(f"extravar {key!r} looks like a secret; nodes must fetch secrets themselves",
                              field=key)
