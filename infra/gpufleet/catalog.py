"""Instance-type facts that the plan, the Pulumi program and the gates rely on.

Every figure cites its source. `cross_check` compares an entry with EC2's
DescribeInstanceTypes answer so a wrong figure is caught before it sizes a subnet
or sets a gate floor.

Sources (abbreviated in the comments below):
  [ec2-types]  EC2 DescribeInstanceTypes (GpuInfo, EfaInfo, MaximumNetworkCards,
               Ipv4AddressesPerInterface, DefaultVCpus), as served for us-east-1.
  [efa-acc]    AWS EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with
               multiple network cards" (efa-acc-inst-types): primary ENA interface on
               network card 0 device 0; EFA-only on card 0 device 1; EFA-only on device 0
               of every other card.
  [research]   ../shared/reference/gates-research.md: (a) expected per SKU (NVLinks, EFA,
               PCIe), (b) published busbw and the recommended initial gates.
  [nvidia-ds]  NVIDIA A100 / H100 / H200 SXM datasheets (NVLink count, PCIe generation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping

from gpufleet.findings import Finding, error, warning


class InterfaceType(str, Enum):
    """EC2 network-interface types as the API spells them."""

    ENA = "interface"  # plain ENA: takes a private IP
    EFA = "efa"  # EFA with ENA: takes a private IP
    EFA_ONLY = "efa-only"  # EFA device only: takes no IP

    @property
    def takes_ip(self) -> bool:
        return self is not InterfaceType.EFA_ONLY

    @property
    def is_efa(self) -> bool:
        return self is not InterfaceType.ENA


@dataclass(frozen=True)
class InterfaceSlot:
    network_card_index: int
    device_index: int
    interface_type: InterfaceType

    @property
    def takes_ip(self) -> bool:
        return self.interface_type.takes_ip


def recommended_layout(network_cards: int, card0_supports_efa: bool = True) -> tuple[InterfaceSlot, ...]:
    """AWS's recommended EFA layout for a multi-card instance [efa-acc]."""
    slots = [InterfaceSlot(0, 0, InterfaceType.ENA)]
    if card0_supports_efa:
        slots.append(InterfaceSlot(0, 1, InterfaceType.EFA_ONLY))
    slots.extend(InterfaceSlot(card, 0, InterfaceType.EFA_ONLY) for card in range(1, network_cards))
    return tuple(slots)


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    gpu_model: str  # the product name nvidia-smi prints (name field)
    gpu_short: str  # the name EC2's GpuInfo uses
    gpus: int
    hbm_gib_per_gpu: int  # marketed size; EC2 reports it in MiB
    nvlinks_per_gpu: int
    pcie_gen: int
    pcie_width: int
    nvswitch: bool  # NVSwitch systems need nvidia-fabricmanager
    network_cards: int
    efa_generation: int
    network_gbps: int  # node network capacity, all cards together
    card_gbps: int  # one network card (the Lustre client's ENA path)
    ipv4_per_interface: int
    intra_node_busbw_floor_gbs: float  # all_reduce busbw floor, 8 GPUs, >= 8 GiB messages
    multi_node_busbw_floor_gbs: float  # ring all_reduce across nodes, >= 4 GiB messages
    interfaces: tuple[InterfaceSlot, ...] = field(default=())
    # CPU topology slurm.conf declares (Sockets x CoresPerSocket x ThreadsPerCore = vcpus): EC2's
    # VCpuInfo DefaultCores and DefaultThreadsPerCore [ec2-types], two sockets on every P4/P5
    sockets: int = 2
    cores_per_socket: int = 0
    threads_per_core: int = 2

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def efa_interfaces(self) -> int:
        return sum(1 for s in self.interfaces if s.interface_type.is_efa)

    @property
    def ips_per_node(self) -> int:
        """Private IPs the interface layout itself consumes (pods excluded)."""
        return sum(1 for s in self.interfaces if s.takes_ip)

    @property
    def hbm_gib_total(self) -> int:
        return self.gpus * self.hbm_gib_per_gpu

    @property
    def network_gbs(self) -> float:
        return self.network_gbps / 8


def _entry(**kw: Any) -> InstanceType:
    kw.setdefault("interfaces", recommended_layout(kw["network_cards"]))
    return InstanceType(**kw)


CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in (
        _entry(
            name="p4d.24xlarge",
            vcpus=96, memory_gib=1152,  # [ec2-types] DefaultVCpus, MemoryInfo 1179648 MiB
            cores_per_socket=24,  # [ec2-types] DefaultCores 48, DefaultThreadsPerCore 2
            gpu_model="NVIDIA A100-SXM4-40GB", gpu_short="A100", gpus=8,  # [ec2-types]
            hbm_gib_per_gpu=40,  # [ec2-types] GpuInfo.MemoryInfo 40960 MiB
            nvlinks_per_gpu=12, pcie_gen=4, pcie_width=16,  # [research] (a) SKU table; [nvidia-ds]
            nvswitch=True,  # HGX A100 8-GPU baseboard with NVSwitch [nvidia-ds]
            network_cards=4, efa_generation=1,  # [ec2-types] MaximumNetworkCards, EfaInfo
            network_gbps=400, card_gbps=100,  # [ec2-types] "4x 100 Gigabit"
            ipv4_per_interface=50,  # [ec2-types] Ipv4AddressesPerInterface
            intra_node_busbw_floor_gbs=220.0,  # [research] (b) recommended gate, A100 220-228
            multi_node_busbw_floor_gbs=38.0,  # [research] (b) p4d ring >= ~38 (0.9 x 42.5)
        ),
        _entry(
            name="p4de.24xlarge",
            vcpus=96, memory_gib=1152,  # [ec2-types]
            cores_per_socket=24,  # [ec2-types] DefaultCores 48, DefaultThreadsPerCore 2
            gpu_model="NVIDIA A100-SXM4-80GB", gpu_short="A100", gpus=8,  # [ec2-types]
            hbm_gib_per_gpu=80,  # [ec2-types] 81920 MiB
            nvlinks_per_gpu=12, pcie_gen=4, pcie_width=16,  # [research] (a)
            nvswitch=True,  # [nvidia-ds]
            network_cards=4, efa_generation=1,  # [ec2-types]
            network_gbps=400, card_gbps=100,  # [ec2-types]
            ipv4_per_interface=50,  # [ec2-types]
            intra_node_busbw_floor_gbs=220.0,  # [research] (b)
            multi_node_busbw_floor_gbs=38.0,  # [research] (b)
        ),
        _entry(
            name="p5.48xlarge",
            vcpus=192, memory_gib=2048,  # [ec2-types] 2097152 MiB
            cores_per_socket=48,  # [ec2-types] DefaultCores 96, DefaultThreadsPerCore 2
            gpu_model="NVIDIA H100 80GB HBM3", gpu_short="H100", gpus=8,  # [ec2-types]; name as in the real -q capture
            hbm_gib_per_gpu=80,  # [ec2-types] 81920 MiB
            nvlinks_per_gpu=18, pcie_gen=5, pcie_width=16,  # [research] (a); [nvidia-ds]
            nvswitch=True,  # HGX H100 [nvidia-ds]
            network_cards=32, efa_generation=2,  # [ec2-types] MaximumNetworkCards 32, EfaInfo 32
            network_gbps=3200, card_gbps=100,  # [ec2-types] "3200 Gigabit"; 32 x 100G [research] (b)
            ipv4_per_interface=50,  # [ec2-types]
            intra_node_busbw_floor_gbs=430.0,  # [research] (b) intra-node H100/H200 >= 430-460
            multi_node_busbw_floor_gbs=330.0,  # [research] (b) p5* ring >= ~330
        ),
        _entry(
            name="p5e.48xlarge",
            vcpus=192, memory_gib=2048,  # [ec2-types]
            cores_per_socket=48,  # [ec2-types] DefaultCores 96, DefaultThreadsPerCore 2
            gpu_model="NVIDIA H200", gpu_short="H200", gpus=8,  # [ec2-types]
            hbm_gib_per_gpu=141,  # [ec2-types] 144384 MiB = 141 GiB
            nvlinks_per_gpu=18, pcie_gen=5, pcie_width=16,  # [research] (a)
            nvswitch=True,  # [nvidia-ds]
            network_cards=32, efa_generation=2,  # [ec2-types]
            network_gbps=3200, card_gbps=100,  # [ec2-types]
            ipv4_per_interface=50,  # [ec2-types]
            intra_node_busbw_floor_gbs=430.0,  # [research] (b) Azure ND H200 v5 431 @16G
            multi_node_busbw_floor_gbs=330.0,  # [research] (b)
        ),
        _entry(
            name="p5en.48xlarge",
            vcpus=192, memory_gib=2048,  # [ec2-types]
            cores_per_socket=48,  # [ec2-types] DefaultCores 96, DefaultThreadsPerCore 2
            gpu_model="NVIDIA H200", gpu_short="H200", gpus=8,  # [ec2-types]
            hbm_gib_per_gpu=141,  # [ec2-types]
            nvlinks_per_gpu=18, pcie_gen=5, pcie_width=16,  # [research] (a)
            nvswitch=True,  # [nvidia-ds]
            network_cards=16, efa_generation=3,  # [ec2-types] MaximumNetworkCards 16, EfaInfo 16
            network_gbps=3200, card_gbps=200,  # [ec2-types]; EFA v3 16 x 200G [research] (b)
            ipv4_per_interface=50,  # [ec2-types]
            intra_node_busbw_floor_gbs=430.0,  # [research] (b)
            multi_node_busbw_floor_gbs=330.0,  # [research] (b) 0.9 x 364.7 measured on 4 x p5en
        ),
    )
}
# p6-b200 is deliberately absent: its EFA v4 layout (8 x 400G) and NVLink5 floors have not
# been verified against DescribeInstanceTypes and a healthy cohort yet.


def get(name: str) -> InstanceType:
    """The catalog entry, or KeyError naming the supported types."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown instance type {name!r}; supported: {', '.join(sorted(CATALOG))}") from None


def cross_check(entry: InstanceType, described: Mapping[str, Any] | None,
                field_path: str = "cluster.instanceType") -> list[Finding]:
    """Compare a catalog entry with one DescribeInstanceTypes item.

    A mismatch is an ERROR: a wrong EFA or GPU count would size subnets and gates wrongly.
    No answer for the type is an explicit WARNING ("unverified"), never a silent pass.
    """
    if described is None:
        return [warning("CATALOG_UNVERIFIED", field_path,
                        f"{entry.name} is not described by EC2 DescribeInstanceTypes here; "
                        "the catalog entry is unverified")]
    findings: list[Finding] = []

    def compare(what: str, ours: Any, theirs: Any) -> None:
        if theirs is None:
            findings.append(warning("CATALOG_UNVERIFIED", field_path,
                                    f"{entry.name}: EC2 does not report {what}; unverified"))
        elif ours != theirs:
            findings.append(error("CATALOG_MISMATCH", field_path,
                                  f"{entry.name}: catalog says {what} = {ours!r}, EC2 says {theirs!r}"))

    gpus = (described.get("GpuInfo") or {}).get("Gpus") or [{}]
    gpu = gpus[0]
    network = described.get("NetworkInfo") or {}
    mem_mib = (gpu.get("MemoryInfo") or {}).get("SizeInMiB")
    compare("GPU count", entry.gpus, gpu.get("Count"))
    compare("GPU name", entry.gpu_short, gpu.get("Name"))
    compare("GPU memory (MiB)", _marketed_gib_to_mib(entry.hbm_gib_per_gpu), mem_mib)
    compare("maximum EFA interfaces", entry.efa_interfaces, (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces"))
    compare("maximum network cards", entry.network_cards, network.get("MaximumNetworkCards"))
    compare("IPv4 addresses per interface", entry.ipv4_per_interface, network.get("Ipv4AddressesPerInterface"))
    vcpu = described.get("VCpuInfo") or {}
    compare("default vCPUs", entry.vcpus, vcpu.get("DefaultVCpus"))
    compare("default cores", entry.cores, vcpu.get("DefaultCores"))
    compare("default threads per core", entry.threads_per_core, vcpu.get("DefaultThreadsPerCore"))
    return findings


def _marketed_gib_to_mib(gib: int) -> int:
    # EC2 reports H200 memory as 144384 MiB (141 GiB marketed); others are exact GiB.
    return gib * 1024


def cross_check_all(described_items: Iterable[Mapping[str, Any]], names: Iterable[str] | None = None) -> list[Finding]:
    """Cross-check several entries against a DescribeInstanceTypes page."""
    by_name = {d.get("InstanceType"): d for d in described_items}
    findings: list[Finding] = []
    for name in names or CATALOG:
        findings.extend(cross_check(CATALOG[name], by_name.get(name)))
    return findings


# The storage base check's client types (gpufleet.plan.storage_clients): network-optimised x86
# (c6in), "Network specifications", Amazon EC2 Instance Types guide:
# https://docs.aws.amazon.com/ec2/latest/instancetypes/co.html#co_network (Gbps, baseline = peak here)
CLIENT_TYPE_GBPS: dict[str, int] = {
    "c6in.8xlarge": 50,
    "c6in.12xlarge": 75,
    "c6in.16xlarge": 100,
    "c6in.24xlarge": 150,
    "c6in.32xlarge": 200,
}


from gpufleet.catalog_prices import BASES, Price, price  # noqa: E402,F401  (sourced prices: infra/gpufleet/catalog_prices.py)
