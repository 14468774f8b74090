"""The NCCL/EFA environment a node's jobs get, derived from the BOM's versions.

Settings that older stacks needed are harmful or pointless on newer ones (aws-ofi-nccl
`doc/efa-env-var.md`, AWS efa-cheatsheet; DESIGN's gates-research appendix), so the set is
computed from the pinned versions instead of copied from a blog post:
- FI_PROVIDER=efa and NCCL_PROTO=simple only for aws-ofi-nccl <= 1.5.0;
- FI_EFA_USE_DEVICE_RDMA=1 only unless libfabric >= 1.18.0 and aws-ofi-nccl >= 1.7.0;
- never FI_EFA_FORK_SAFE or RDMAV_*: the plugin handles fork safety itself;
- NCCL_BUFFSIZE / NCCL_P2P_NET_CHUNKSIZE (AWS's sbatch values) only below aws-ofi-nccl
  1.16.0, which sets its own defaults for them on AWS (aws/aws-ofi-nccl#941);
- NCCL_MIN_CHANNELS stays at NCCL's default;
- NCCL_SOCKET_IFNAME excludes (`^lo,docker,veth`) instead of selecting `en`: an EKS pod on the VPC
  CNI only has `eth0`, and NCCL's prefix filter `en` then finds no bootstrap interface
  (node-config-review F7; the gate launcher and AWS's samples use the same exclusion);
- with EFA, NCCL_NET_PLUGIN=ofi and NCCL_NET naming the plugin's network: NCCL dlopens the plugin
  by name and falls back to sockets silently when it cannot; NCCL_NET makes that fallback an
  error (aws-ofi-nccl 1.15.0 release notes: `libnccl-net-ofi.so`, "allows users to set
  NCCL_NET_PLUGIN=ofi"; from 1.15.0 the plugin's network is "Libfabric"; older plugins' "AWS
  Libfabric" has a space a sourced env file cannot carry, so they get neither; node-config-review F4).
Pure function: the role only renders what this returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.bom import Bom, version_lt


# every interface but loopback and container bridges: the host's ens*/enp* and a pod's eth0 alike
SOCKET_IFNAME = "^lo,docker,veth"


@dataclass(frozen=True)
class NcclEnv:
    """`nccl_conf` goes to /etc/nccl.conf (NCCL reads NCCL_* from it); `job_env` to the job env file."""

    nccl_conf: dict[str, str]
    job_env: dict[str, str]


def derive_nccl_env(*, aws_ofi_nccl: str, libfabric: str, efa: bool = True) -> NcclEnv:
    """Environment for NCCL over EFA (or plain sockets when the node has no EFA)."""
    nccl: dict[str, str] = {"NCCL_SOCKET_IFNAME": SOCKET_IFNAME}
    fabric: dict[str, str] = {}
    if efa:
        legacy_plugin = not version_lt("1.5.0", aws_ofi_nccl)  # <= 1.5.0
        if legacy_plugin:
            fabric["FI_PROVIDER"] = "efa"
            nccl["NCCL_PROTO"] = "simple"
        if version_lt(libfabric, "1.18.0") or version_lt(aws_ofi_nccl, "1.7.0"):
            fabric["FI_EFA_USE_DEVICE_RDMA"] = "1"
        if version_lt(aws_ofi_nccl, "1.16.0"):
            nccl["NCCL_BUFFSIZE"] = "8388608"
            nccl["NCCL_P2P_NET_CHUNKSIZE"] = "524288"
        if not version_lt(aws_ofi_nccl, "1.15.0"):
            nccl["NCCL_NET"] = "Libfabric"
            nccl["NCCL_NET_PLUGIN"] = "ofi"
    return NcclEnv(nccl_conf=dict(sorted(nccl.items())), job_env=dict(sorted({**nccl, **fabric}.items())))


def nccl_env_for(bom: Bom, *, efa: bool = True) -> NcclEnv:
    c = bom.components
    return derive_nccl_env(aws_ofi_nccl=c.aws_ofi_nccl.version, libfabric=c.efa_installer.libfabric, efa=efa)
