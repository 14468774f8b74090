"""slurm.conf, gres.conf and topology.conf generated from the plan, pure.

Why generated: node definitions, partitions and the topology must say exactly what the plan says
(blocks, units, partitions on whole blocks, real CPU/memory/GPUs from the catalog), for a real
cluster and for the local test cluster alike; only the transport differs, so one generator takes
an explicit flavour:
- `RealFlavour`: munge, the controller's address, system paths, cgroups; nodes resolve by name.
- `LocalFlavour`: auth/none, every daemon on 127.0.0.1 on free ports found by the caller, state
  under the stack's state dir, fake GPU device files (symlinks to /dev/null), config_overrides
  so 125 nodes of 192 CPUs fit on a laptop.

Access: a partition some tenant names (`gpufleet:ops.tenants`) gets `AllowAccounts=` (root and
those teams), enforced at submission (`EnforcePartLimits=ALL`: a job its partition can never take
is refused, not left pending forever). An account is only a claim until slurmdbd checks it, so
tenants on a Slurm pool need `ops.slurmAccounting`, which turns on associations, limits and QOS.

Every node starts drained with the pending reason (nothing takes work before its gates), and the
topology puts each block under one switch (`topology/tree`, Slurm < 23.11) or in one block
(`topology/block`, 23.11 and later), so a unit request (`unit_request_args`) lands inside one
block; job_submit.lua (`gpufleet.pool.slurm.job_submit`) holds every job to that. Nodes carry no
Weight: the tree plugin's best fit already packs the fullest leaf that fits, and 22.05 makes a
job's lowest-weight nodes *required* when they alone are too few, which pinned a one-unit job to
a lone free node of block 0 (seen on the real slurmctld: "switch=block0000 ... required:1") so it
never started in block 1 once two nodes freed there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

from gpufleet.catalog import InstanceType
from gpufleet.errors import ConfigError, PoolError
from gpufleet.plan.access import PATROL_QOS, allow_accounts, default_qos, partition_allow_qos, partition_qos_name
from gpufleet.plan.model import ClusterPlan, PartitionAllocation
from gpufleet.pool.protocol import PENDING_REASON
from gpufleet.plan.network import SLURMCTLD_PORT, SLURMD_PORT, SRUN_PORTS  # the ports the security groups open
from gpufleet.pool.slurm.hostlist import hostlist
from gpufleet.pool.slurm.job_submit import SWITCH_WAIT_S, job_submit_lua, nodes_for_units
from gpufleet.pool.slurm.nodes import GATES_PARTITION
from gpufleet.spec import ClusterSpec, PartitionMode

TopologyKind = Literal["tree", "block"]
BLOCK_TOPOLOGY_SINCE = (23, 11)
MAX_PRIORITY_TIER = 65533  # PriorityTier is a 16-bit value in Slurm
MEMORY_SHARE = 0.95  # RealMemory above what the node reports makes slurmd INVAL: leave the OS its share


@dataclass(frozen=True)
class RealFlavour:
    controller_host: str  # the controller's hostname (SlurmctldHost=name(address))
    controller_address: str  # Pulumi output slurmControllerIp
    kind: Literal["real"] = "real"
    etc_dir: str = "/etc/slurm"


@dataclass(frozen=True)
class LocalFlavour:
    root: Path  # everything under here: state, spool, logs, pids, fake devices
    controller_port: int
    first_node_port: int  # nodes take first_node_port .. first_node_port + nodes - 1
    kind: Literal["local"] = "local"
    # slurmd inside network namespaces (gpufleet.pool.slurm.local.NodeHost): where they reach slurmctld,
    # and each node's NodeAddr; None: every daemon on 127.0.0.1
    controller_address: str | None = None
    node_addresses: Mapping[str, str] | None = None
    slurmdbd_port: int | None = None  # the caller's slurmdbd on 127.0.0.1, for stacks with accounting

    @property
    def fakedev(self) -> Path:
        return self.root / "fakedev"

    @property
    def spool(self) -> Path:
        return spool_dir(self.root)


def spool_dir(root: Path) -> Path:
    """Where each slurmd of the local cluster under `root` keeps its spool (`<spool>/<node>`), short
    enough for slurmstepd's sockets (`<spool>/<node>/<node>_<job>.<step>`, at most 107 bytes,
    sun_path's limit): under the state dir when that is short, else a folder under /tmp named by
    the state dir's hash. A project under a long path made every srun fail once job ids reached 3
    digits ("Unix socket path ... is too long. (109 > 108)"), and the gates read that as failed pairs."""
    inside = root / "spool"
    if len(str(inside)) <= SPOOL_INSIDE_MAX:
        return inside
    import hashlib

    return Path("/tmp") / f"gpufleet-spool-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"


SPOOL_INSIDE_MAX = 32  # bytes of the spool dir kept inside the state dir (room for two node names)
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with its terminating NUL
STEP_SUFFIX_MAX = len("_99999999.4294967292")  # `_<job id>.<step id>`: the extern/batch steps' ids are 10 digits


def socket_path_length(spool: Path, node: str) -> int:
    """The longest slurmstepd socket path of `node` under `spool`."""
    return len(str(spool / node / node)) + STEP_SUFFIX_MAX


Flavour = RealFlavour | LocalFlavour


@dataclass(frozen=True)
class SlurmConfig:
    slurm_conf: str
    gres_conf: str
    topology_conf: str
    topology: TopologyKind
    job_submit_lua: str = ""  # JobSubmitPlugins=lua reads it beside slurm.conf

    def files(self) -> dict[str, str]:
        files = {"slurm.conf": self.slurm_conf, "gres.conf": self.gres_conf, "topology.conf": self.topology_conf}
        if self.job_submit_lua:
            files["job_submit.lua"] = self.job_submit_lua
        return files


def parse_version(version: str) -> tuple[int, int]:
    m = re.match(r"^\s*(\d+)\.(\d+)", version)
    if not m:
        raise ConfigError(f"{version!r} is not a Slurm version", field="gpufleet:pool.slurmVersion",
                          expected="a version like 24.11.6 or 22.05")
    return int(m.group(1)), int(m.group(2))


def topology_kind(version: str) -> TopologyKind:
    return "block" if parse_version(version) >= BLOCK_TOPOLOGY_SINCE else "tree"


def block_name(block: int) -> str:
    return f"block{block:04d}"


def priority_tiers(partitions: Sequence[PartitionAllocation]) -> dict[str, int]:
    """PriorityTier per partition: its priority when Slurm's 16 bits hold them all, else the dense rank."""
    prios = [p.priority for p in partitions]
    if all(0 <= p <= MAX_PRIORITY_TIER for p in prios):
        return {p.name: p.priority for p in partitions}
    rank = {v: i + 1 for i, v in enumerate(sorted(set(prios)))}
    return {p.name: rank[p.priority] for p in partitions}


def _block_slots(plan: ClusterPlan, blocks: Sequence[int]) -> list[str]:
    return [plan.slot(i).name for b in blocks for i in plan.block(b).nodes]


def _max_time(spec: ClusterSpec, name: str) -> str:
    minutes = spec.pool.slurm_max_minutes.get(name)
    if minutes is None:
        mode = next((p.mode for p in spec.partitions if p.name == name), None)
        if mode is PartitionMode.INTERACTIVE:
            minutes = spec.pool.slurm_interactive_max_minutes
    return "INFINITE" if minutes is None else str(minutes)


def generate(spec: ClusterSpec, plan: ClusterPlan, flavour: Flavour, version: str) -> SlurmConfig:
    """The three files for this plan. `version` is the Slurm slurmctld runs (decides the topology)."""
    unknown = set(spec.pool.slurm_max_minutes) - {p.name for p in plan.partitions}
    if unknown:
        raise ConfigError(f"MaxTime given for partition(s) the plan lacks: {', '.join(sorted(unknown))}",
                          field="gpufleet:pool.slurmMaxMinutes",
                          expected=f"names among {', '.join(p.name for p in plan.partitions) or '(no partitions)'}")
    if spec.ops.tenants and not spec.ops.slurm_accounting:
        raise ConfigError("tenants on a Slurm pool need accounting: without slurmdbd enforcing associations, "
                          "any user may name any account and AllowAccounts keeps no one out",
                          field="gpufleet:ops.slurmAccounting", expected="true when gpufleet:ops.tenants is set")
    if spec.pool.preemption != "off" and len({t.priority for t in spec.ops.tenants}) < 2:
        raise ConfigError(f"pool.preemption {spec.pool.preemption!r} needs teams of different priorities to "
                          "preempt between (Slurm preempts by the teams' QOS)", field="gpufleet:pool.preemption",
                          expected="off, or ops.tenants with at least two different priority values")
    if spec.ops.slurm_accounting and isinstance(flavour, LocalFlavour) and flavour.slurmdbd_port is None:
        raise PoolError("this stack has Slurm accounting but the local cluster was given no slurmdbd port")
    sku = spec.cluster.instance
    kind = topology_kind(version)
    return SlurmConfig(slurm_conf=_slurm_conf(spec, plan, flavour, sku, kind), gres_conf=_gres_conf(plan, flavour, sku),
                       topology_conf=_topology_conf(plan, kind), topology=kind,
                       job_submit_lua=job_submit_lua(plan, kind, default_qos(spec.ops.tenants),
                                                     PATROL_QOS if has_accounting(spec, flavour) else None))


def _header(spec: ClusterSpec, flavour: Flavour, kind: TopologyKind) -> list[str]:
    common = [
        f"ClusterName={spec.cluster.name}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill",
        "GresTypes=gpu",
        f"TopologyPlugin=topology/{kind}",
        "ReturnToService=1",  # a drained node stays drained across restarts: only gpufleet resumes it
        "EnforcePartLimits=ALL",  # refuse at submission what a partition never takes (size, time, accounts)
        "JobSubmitPlugins=lua",  # job_submit.lua: whole units only, one block each (gpufleet.pool.slurm.job_submit)
        f"SchedulerParameters=max_switch_wait={SWITCH_WAIT_S}",  # the plugin's --switches wait, not the 300 s default
        *_preemption(spec, flavour),
        *_accounting(spec, flavour),
        "SlurmctldTimeout=120",
        "SlurmdTimeout=300",
        "InactiveLimit=0",
        # gpufleet configures no MTA, and Slurm's /bin/mail is absent on AL2023 and Debian minimal
        # ("error: Configured MailProg is invalid" at every start): --mail-type is accepted and dropped
        "MailProg=/bin/true",
        "MinJobAge=300",
        "KillWait=30",
    ]
    if isinstance(flavour, LocalFlavour):
        r = flavour.root
        return [
            "# gpufleet local test cluster: auth/none, 127.0.0.1, state under the stack's state dir",
            *common,
            f"SlurmctldHost=localhost({flavour.controller_address})" if flavour.controller_address
            else "SlurmctldHost=localhost",
            f"SlurmctldPort={flavour.controller_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/none",
            "CredType=cred/none",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={flavour.spool}/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SlurmdParameters=config_overrides",  # declare the catalog's CPUs and memory on a small box
        ]
    return [
        "# gpufleet: generated from the plan; do not edit by hand (re-run the slurm role)",
        *common,
        f"SlurmctldHost={flavour.controller_host}({flavour.controller_address})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        f"SrunPortRange={SRUN_PORTS[0]}-{SRUN_PORTS[1]}",  # the only ports the node SG lets back to srun
        "SlurmUser=slurm",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "MpiDefault=pmix",
        "PrologFlags=Alloc,Contain",
        # steps keep slurmd's unlimited memlock (EFA memory registration), not the submitting shell's:
        # srun runs on the controller, which has no EFA limits (slurm.conf(5); node-config-review M7)
        "PropagateResourceLimitsExcept=MEMLOCK",
    ]


def _preemption(spec: ClusterSpec, flavour: Flavour) -> list[str]:
    """pool.preemption: the teams' QOS decide (preempt/qos; each team QOS's Preempt= lists the lower
    teams' QOS of its partition, `gpufleet.plan.access.preempt_lists`), and a pending job's QOS
    priority orders the queue too (multifactor, QOS the only weight: otherwise first come, first served).
    Off, with accounting, preempt/qos stays on for the patrol's holds alone (`PATROL_QOS`, the only QOS
    any Preempt= names then): a real job cancels the hold on a node it needs."""
    if spec.pool.preemption == "off":
        return ["PreemptType=preempt/qos", "PreemptMode=CANCEL"] if has_accounting(spec, flavour) else []
    return ["PreemptType=preempt/qos", f"PreemptMode={spec.pool.preemption.upper()}",
            "PriorityType=priority/multifactor", "PriorityWeightQOS=10000"]


def has_accounting(spec: ClusterSpec, flavour: Flavour) -> bool:
    """The stack asks for it, or the local cluster runs a slurmdbd (`gpufleet pool up` starts one)."""
    return spec.ops.slurm_accounting or (isinstance(flavour, LocalFlavour) and flavour.slurmdbd_port is not None)


def _accounting(spec: ClusterSpec, flavour: Flavour) -> list[str]:
    """slurmdbd on the head node (real) or the caller's (local); the gres/gpu TRES is what the
    teams' QOS limits count (`gpufleet.plan.access.sacctmgr_commands`)."""
    if not has_accounting(spec, flavour):
        return ["AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none"]
    if isinstance(flavour, LocalFlavour):
        host, port, gather = "localhost", flavour.slurmdbd_port, "jobacct_gather/none"
    else:
        host, port, gather = flavour.controller_host, spec.ops.slurmdbd_port, "jobacct_gather/cgroup"
    return ["AccountingStorageType=accounting_storage/slurmdbd", f"AccountingStorageHost={host}",
            f"AccountingStoragePort={port}", "AccountingStorageEnforce=associations,limits,qos",
            "AccountingStorageTRES=gres/gpu", f"JobAcctGatherType={gather}"]


def _slurm_conf(spec: ClusterSpec, plan: ClusterPlan, flavour: Flavour, sku: InstanceType, kind: TopologyKind) -> str:
    lines = _header(spec, flavour, kind)
    gpu_type = sku.gpu_short.lower()
    memory_mb = int(sku.memory_gib * 1024 * MEMORY_SHARE)
    lines.append("")
    lines.append(f"# {plan.topology.nodes} nodes of {sku.name}: {sku.gpus}x {sku.gpu_model}, {sku.vcpus} vCPUs; "
                 f"{plan.topology.blocks} blocks of {plan.topology.nodes_per_block} nodes "
                 f"({plan.topology.units_per_block} units of {plan.topology.unit_gpus} GPUs)")
    for block in plan.blocks:
        names = [plan.slot(i).name for i in block.nodes]
        where = ""
        if isinstance(flavour, LocalFlavour):
            first = flavour.first_node_port + block.nodes[0]
            last = flavour.first_node_port + block.nodes[-1]
            ports = str(first) if first == last else f"[{first}-{last}]"
            where = f" NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports}"
            if flavour.node_addresses is not None:
                addresses = ",".join(flavour.node_addresses[n] for n in names)
                where = f" NodeHostname={hostlist(names)} NodeAddr={addresses} Port={ports}"
        cpus = f"CPUs={sku.vcpus}"
        if sku.cores_per_socket:
            cpus += f" Sockets={sku.sockets} CoresPerSocket={sku.cores_per_socket} ThreadsPerCore={sku.threads_per_core}"
        lines.append(f"NodeName={hostlist(names)}{where} {cpus} RealMemory={memory_mb} "
                     f"Gres=gpu:{gpu_type}:{sku.gpus} Feature={block_name(block.id)} "
                     f'State=DRAIN Reason="{PENDING_REASON}"')
    lines.append("")
    tiers = priority_tiers(plan.partitions)
    access = allow_accounts(spec.ops.tenants, [p.name for p in plan.partitions]) if spec.ops.tenants else {}
    allow_qos = partition_allow_qos(spec.ops.tenants, [p.name for p in plan.partitions]) if spec.ops.tenants else {}
    # its limit holds every account's jobs there. slurmctld is fatal on a partition QOS slurmdbd lacks
    # ("Partition train has an invalid qos (part-train)"), so whoever starts slurmctld creates them
    # first: `LocalSlurm.up`, and on a head node the slurm_accounting role (`partition_qos_names`),
    # which starts slurmctld there in place of the slurm role
    partition_qos = has_accounting(spec, flavour)
    first = True
    for p in plan.partitions:
        if not p.blocks:
            continue
        nodes = _block_slots(plan, p.blocks)
        limit = ""
        if p.quota_units is not None:
            limit = f" MaxNodes={max(1, nodes_for_units(plan, p.quota_units))}"
        if p.name in access:
            limit += f" AllowAccounts={access[p.name]} AllowQos={allow_qos[p.name]}"
        if partition_qos:
            limit += f" QOS={partition_qos_name(p.name)}"
        lines.append(f"PartitionName={p.name} Nodes={hostlist(nodes)} PriorityTier={tiers[p.name]} "
                     f"MaxTime={_max_time(spec, p.name)}{limit} Default={'YES' if first else 'NO'} State=UP")
        first = False
    if first:  # no partitions: the whole pool is one queue
        lines.append("PartitionName=all Nodes=ALL MaxTime=INFINITE Default=YES State=UP")
    else:  # gpufleet's gate runs, whose node sets may span partitions: hidden, lowest tier, gate reservations only
        lines.append(f"PartitionName={GATES_PARTITION} Nodes=ALL Hidden=YES PriorityTier=1 MaxTime=INFINITE "
                     "Default=NO State=UP")
    return "\n".join(lines) + "\n"


def partition_qos_names(spec: ClusterSpec, plan: ClusterPlan, flavour: Flavour) -> list[str]:
    """The partition QOS slurm.conf names (`QOS=`), which slurmdbd must hold before slurmctld starts."""
    if not has_accounting(spec, flavour):
        return []
    return [partition_qos_name(p.name) for p in plan.partitions if p.blocks]


def _gres_conf(plan: ClusterPlan, flavour: Flavour, sku: InstanceType) -> str:
    gpu_type = sku.gpu_short.lower()
    dev = f"{flavour.fakedev}/nvidia" if isinstance(flavour, LocalFlavour) else "/dev/nvidia"
    files = f"{dev}[0-{sku.gpus - 1}]" if sku.gpus > 1 else f"{dev}0"
    names = hostlist([n.name for n in plan.nodes])
    return f"NodeName={names} Name=gpu Type={gpu_type} File={files}\n"


def _topology_conf(plan: ClusterPlan, kind: TopologyKind) -> str:
    lines = [f"# one {'block' if kind == 'block' else 'leaf switch'} per plan block of "
             f"{plan.topology.nodes_per_block} nodes: a unit never leaves its block"]
    for block in plan.blocks:
        names = hostlist([plan.slot(i).name for i in block.nodes])
        key = "BlockName" if kind == "block" else "SwitchName"
        lines.append(f"{key}={block_name(block.id)} Nodes={names}")
    if kind == "block":
        lines.append(f"BlockSizes={','.join(str(n) for n in block_sizes(plan))}")
    elif len(plan.blocks) > 1:
        lines.append(f"SwitchName=fabric Switches={hostlist([block_name(b.id) for b in plan.blocks])}")
    return "\n".join(lines) + "\n"


def block_sizes(plan: ClusterPlan) -> list[int]:
    """topology/block's BlockSizes: the plan's block (the base block) and each power-of-two
    aggregate of it that the cluster holds (Slurm accepts only those), so a job of whole blocks fits."""
    npb, blocks = plan.topology.nodes_per_block, max(1, plan.topology.blocks)
    sizes, k = [], 1
    while k <= blocks:
        sizes.append(npb * k)
        k *= 2
    return sizes


def unit_request_args(plan: ClusterPlan, partition: str, units: int, kind: TopologyKind) -> list[str]:
    """sbatch/srun arguments for `units` whole units of `partition`, inside one block.

    Up to one block's units: the nodes those units span, their GPUs, and one switch (tree) or one
    segment (block). More than a block: whole blocks only (a unit never straddles two), each
    placed as one segment; under tree the job spans switches, as it must.
    """
    allocation = next((p for p in plan.partitions if p.name == partition), None)
    if allocation is None:
        raise PoolError(f"partition {partition!r} is not in the plan "
                        f"(it has {', '.join(p.name for p in plan.partitions) or 'none'})")
    if units < 1:
        raise PoolError(f"{partition}: a job takes at least one unit (asked {units})")
    t = plan.topology
    args = [f"--partition={partition}"]
    if units <= t.units_per_block:
        nodes = nodes_for_units(plan, units)
        args += [f"--nodes={nodes}", f"--gpus={units * t.unit_gpus}"]
        args.append("--switches=1" if kind == "tree" else f"--segment={nodes}")
        return args
    if units % t.units_per_block:
        raise PoolError(f"{partition}: {units} units span more than one block of {t.units_per_block} units, so they "
                        f"must be whole blocks (a multiple of {t.units_per_block})")
    nodes = units // t.units_per_block * t.nodes_per_block
    args += [f"--nodes={nodes}", f"--gpus-per-node={t.gpus_per_node}", "--exclusive"]
    if kind == "block":
        args.append(f"--segment={t.nodes_per_block}")
    return args
