"""Launch specs for multi-node all_reduce runs: `srun` (Slurm), an MPIJob (Kubernetes), `mpirun`
over SSH. The gates produce the spec; the pool's adapter executes it and returns bundles.

Why generated from catalog + BOM: the NCCL/EFA environment depends on versions (FI_PROVIDER and
NCCL_PROTO only for aws-ofi-nccl <= 1.5.0; FI_EFA_USE_DEVICE_RDMA only for libfabric < 1.18;
research appendix) and on the SKU (EFA count, GPUs per node). NCCL_ALGO=Ring because two-node
tree/NVLS results exceed NIC line rate and hide network faults (research section 0 item 3).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.catalog import InstanceType

Kind = Literal["slurm", "kubernetes", "ssh"]
GATE_TAINT_KEY = "gpufleet.io/gate"
ALL_REDUCE = "/opt/nccl-tests/build/all_reduce_perf"
DEFAULT_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests:latest"


class LaunchSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind
    name: str
    nodes: tuple[str, ...]
    ranks: int
    env: dict[str, str]
    argv: tuple[str, ...] = ()  # slurm / ssh: the command line
    manifest: dict[str, Any] | None = Field(default=None)  # kubernetes: the MPIJob object

    @property
    def command_line(self) -> str:
        return shlex.join(self.argv)


def _ver(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or "")[:3]) or (0,)


def nccl_env(sku: InstanceType, versions: Mapping[str, str], ring: bool = True) -> dict[str, str]:
    env = {
        "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",  # proof that EFA is used (research #36)
        "NCCL_SOCKET_IFNAME": "^lo,docker,veth",
        "NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288",
        "FI_EFA_USE_HUGE_PAGE": "0",
    }
    if ring:
        env["NCCL_ALGO"] = "Ring"
    ofi = versions.get("aws_ofi_nccl")
    if ofi and _ver(ofi) <= (1, 5, 0):
        env.update({"FI_PROVIDER": "efa", "NCCL_PROTO": "simple"})
    lf = versions.get("libfabric")
    if lf and _ver(lf) < (1, 18, 0) and sku.efa_generation >= 1:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env


def all_reduce_args(message_bytes: int, gpus_per_rank: int = 1) -> list[str]:
    return [ALL_REDUCE, "-b", str(message_bytes), "-e", str(message_bytes), "-f", "2", "-g", str(gpus_per_rank),
            "-c", "1", "-n", "20"]


def launch_spec(kind: Kind, nodes: Sequence[str], sku: InstanceType, versions: Mapping[str, str],
                message_bytes: int = 4 * 2**30, name: str | None = None, image: str = DEFAULT_IMAGE,
                srun_mpi: str = "pmix") -> LaunchSpec:
    """`srun_mpi`: srun's MPI plugin, the pool's (PMIx on a cluster the slurm role built)."""
    nodes = tuple(nodes)
    ranks = len(nodes) * sku.gpus
    env = nccl_env(sku, versions, ring=True)
    name = name or "gate-" + "-".join(n.replace(".", "-") for n in nodes)[:50].rstrip("-")
    args = all_reduce_args(message_bytes)
    if kind == "slurm":
        # values hold commas (NCCL_DEBUG_SUBSYS=INIT,NET), which --export=K=V,... cannot carry: set
        # them in srun's environment and export ALL
        argv = ("env", *(f"{k}={v}" for k, v in sorted(env.items())), "srun", f"--job-name={name}", f"--nodelist={','.join(nodes)}", f"--nodes={len(nodes)}",
                f"--ntasks-per-node={sku.gpus}", f"--mpi={srun_mpi}", "--cpu-bind=none", "-l", "--export=ALL", *args)
        return LaunchSpec(kind=kind, name=name, nodes=nodes, ranks=ranks, env=env, argv=argv)
    if kind == "ssh":
        argv = ["mpirun", "--host", ",".join(f"{n}:{sku.gpus}" for n in nodes), "-np", str(ranks), "--tag-output",
                "--mca", "plm_rsh_agent", "ssh", "--bind-to", "none"]
        for k, v in sorted(env.items()):
            argv += ["-x", f"{k}={v}"]
        return LaunchSpec(kind=kind, name=name, nodes=nodes, ranks=ranks, env=env, argv=tuple(argv + args))
    if kind == "kubernetes":
        return LaunchSpec(kind=kind, name=name, nodes=nodes, ranks=ranks, env=env,
                          manifest=_mpijob(name, nodes, sku, env, args, image))
    raise ValueError(f"unknown launcher kind {kind!r}")


def _mpijob(name: str, nodes: tuple[str, ...], sku: InstanceType, env: dict[str, str], args: list[str],
            image: str) -> dict[str, Any]:
    """A Kubeflow MPI-operator v2beta1 MPIJob pinned to the node set and tolerating the gate taint."""
    env_list = [{"name": k, "value": v} for k, v in sorted(env.items())]
    toleration = {"key": GATE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
    launcher_cmd = ["mpirun", "-np", str(len(nodes) * sku.gpus), "--tag-output", "--bind-to", "none",
                    *[x for k in sorted(env) for x in ("-x", k)], *args]
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpufleet", "gpufleet.io/purpose": "gate"}},
        "spec": {
            "slotsPerWorker": sku.gpus, "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {
                    "tolerations": [toleration], "restartPolicy": "Never",
                    "containers": [{"name": "launcher", "image": image, "command": launcher_cmd, "env": env_list}]}}},
                "Worker": {"replicas": len(nodes), "template": {"spec": {
                    "tolerations": [toleration],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                               "values": list(nodes)}]}]}},
                                 "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                                     {"labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": name}},
                                      "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [{"name": "worker", "image": image, "env": env_list,
                                    "resources": node_resources(sku)}]}}},
            },
        },
    }


def node_resources(sku: InstanceType) -> dict[str, dict[str, Any]]:
    """A pod that takes a whole node for a multi-node run: every GPU and EFA device (the device
    plugins' resources), the huge pages libfabric's EFA provider registers memory from."""
    want = {"nvidia.com/gpu": sku.gpus, "vpc.amazonaws.com/efa": sku.efa_interfaces, "hugepages-2Mi": "5120Mi",
            "memory": "32Gi"}
    return {"limits": dict(want), "requests": dict(want)}


def round_specs(groups: Sequence[Sequence[str]], kind: Kind, sku: InstanceType, versions: Mapping[str, str],
                message_bytes: int = 4 * 2**30, srun_mpi: str = "pmix") -> list[LaunchSpec]:
    """One round of the isolation schedule as launch specs (run in parallel by the adapter)."""
    return [launch_spec(kind, g, sku, versions, message_bytes, srun_mpi=srun_mpi) for g in groups]
