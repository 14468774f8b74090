"""The real cluster's Slurm configuration on disk, and the `slurm` role's extravars that name it.

Why files and not variables: slurm.conf for 1,250 nodes is generated here from the plan and the
role only copies it; passing file paths keeps the extravars small and shows the exact files in
the stack's state dir for review. Nothing in them is secret (munge's key never is here).
"""

from __future__ import annotations

from gpufleet.bom import load_bom, resolve_bom_path
from gpufleet.durable import write_atomic
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.slurm.conf import RealFlavour, generate, partition_qos_names
from gpufleet.project import Project
from gpufleet.spec import ClusterSpec

CONFIG_DIR = "slurm-config"


def ec2_hostname(address: str) -> str:
    """The hostname EC2 gives an instance with IP-based naming (ip-10-0-16-10), which slurmctld
    compares with SlurmctldHost."""
    return "ip-" + address.replace(".", "-")


def target_slurm_version(spec: ClusterSpec, project: Project | None = None) -> str:
    """The Slurm the nodes run: `pool.slurmVersion`, else the BOM's pin for the stack's OS."""
    if spec.pool.slurm_version:
        return spec.pool.slurm_version
    return load_bom(resolve_bom_path(spec, project)).for_os(spec.image.os).slurm


def write_slurm_config(spec: ClusterSpec, plan: ClusterPlan, project: Project, stack: str, controller_ip: str,
                       *, controller_host: str | None = None) -> dict[str, str]:
    """Write slurm.conf, gres.conf, topology.conf and job_submit.lua under `<state dir>/slurm-config/` (each file
    atomically) for the controller at `controller_ip` (Pulumi's `slurmControllerIp`); return the
    extravars of the `slurm` role."""
    version = target_slurm_version(spec, project)
    flavour = RealFlavour(controller_host=controller_host or ec2_hostname(controller_ip),
                          controller_address=controller_ip)
    config = generate(spec, plan, flavour, version)
    folder = project.state_dir(stack) / CONFIG_DIR
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / name for name in config.files()}
    for name, text in config.files().items():
        write_atomic(paths[name], text)
    return {"slurm_version": version, "slurm_conf_file": str(paths["slurm.conf"]),
            "slurm_gres_conf_file": str(paths["gres.conf"]), "slurm_topology_conf_file": str(paths["topology.conf"]),
            "slurm_job_submit_lua_file": str(paths["job_submit.lua"])}



def accounting_extravars(spec: ClusterSpec, plan: ClusterPlan) -> dict[str, list[str]]:
    """The `slurm_accounting` role's QOS to create before it starts slurmctld (slurm.conf's partition
    `QOS=`); empty without accounting, where the slurm role starts slurmctld itself."""
    if not spec.ops.slurm_accounting:
        return {}
    flavour = RealFlavour(controller_host="", controller_address="")  # the names do not depend on it
    return {"slurm_accounting_partition_qos": partition_qos_names(spec, plan, flavour)}
