"""Realistic raw tool output for one node, healthy or with named faults, in the real formats.

Why in the package: tests, the benchmark and the simulator need bundles that the real parsers
read exactly like real captures (the healthy H100 fields match the real 590.48.01 capture), and
one generator keeps them from drifting into agreeing only with each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from infra import catalog
from infra.gates import bundle as B

DEFAULT_VERSIONS = {
    "nvidia_driver": "550.127.08", "fabric_manager": "550.127.08", "cuda": "12.4.131", "dcgm": "3.3.9",
    "nccl": "2.21.5", "aws_ofi_nccl": "1.11.0-aws", "efa_installer": "1.34.0", "libfabric": "1.22.0amzn1.0",
    "kernel": "6.1.112-124.190.amzn2023.x86_64",
}
FAULTS = frozenset({
    "ecc_uncorrectable", "remap_pending", "remap_failure", "nvlink_down", "efa_missing", "wrong_counts",
    "socket_fallback", "fabricmanager_inactive", "version_skew", "thermal", "dcgm_fail", "lustre_unmounted",
})


@dataclass(frozen=True)
class NodeSpec:
    slot: str
    instance_type: str = "p5.48xlarge"
    instance_id: str = "i-0123456789abcdef0"
    faults: frozenset[str] = frozenset()
    xids: tuple[int, ...] = ()
    intra_busbw: float = 480.0  # large-message busbw this node reaches
    versions: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_VERSIONS))
    batch: int | None = 0
    stack: str | None = "local"


_QUERY_HEADER_UNITS = {"memory.total": "MiB", "power.draw": "W", "temperature.gpu": "",
                       "clocks_event_reasons_counters.hw_thermal_slowdown": "us",
                       "clocks_event_reasons_counters.hw_power_brake_slowdown": "us"}


def query_gpu_csv(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    fields = B.QUERY_GPU_FIELDS.split(",")
    header = ", ".join(f"{f} [{_QUERY_HEADER_UNITS[f]}]" if _QUERY_HEADER_UNITS.get(f) else f for f in fields)
    lines = [header]
    for i in range(sku.gpus):
        bad = i == 3
        v = {
            "timestamp": "2026/07/14 08:12:38.696", "driver_version": n.versions["nvidia_driver"], "count": str(sku.gpus),
            "name": sku.gpu_model, "pci.bus_id": f"00000000:{0x53 + 0x10 * i:02X}:00.0", "persistence_mode": "Enabled",
            "mig.mode.current": "Disabled", "ecc.mode.current": "Enabled", "ecc.mode.pending": "Enabled",
            "ecc.errors.uncorrected.volatile.total": "2" if bad and "ecc_uncorrectable" in n.faults else "0",
            "ecc.errors.uncorrected.aggregate.total": "2" if bad and "ecc_uncorrectable" in n.faults else "0",
            "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded": "No",
            "remapped_rows.correctable": "0",
            "remapped_rows.uncorrectable": "1" if bad and n.faults & {"remap_pending", "remap_failure"} else "0",
            "remapped_rows.pending": "Yes" if bad and "remap_pending" in n.faults else "No",
            "remapped_rows.failure": "Yes" if bad and "remap_failure" in n.faults else "No",
            "remapped_rows.histogram.none": "0", "pcie.link.gen.current": "5" if sku.pcie_gen == 5 else "4",
            "pcie.link.gen.max": str(sku.pcie_gen), "pcie.link.gen.gpumax": str(sku.pcie_gen),
            "pcie.link.width.current": "16", "pcie.link.width.max": "16",
            "clocks_event_reasons.active": "0x0000000000000041" if bad and "thermal" in n.faults else "0x0000000000000001",
            "clocks_event_reasons_counters.hw_thermal_slowdown": "0 us",
            "clocks_event_reasons_counters.hw_power_brake_slowdown": "0 us", "gpu_recovery_action": "None",
            "fabric.state": "Completed", "fabric.status": "Success", "memory.total": f"{sku.hbm_gib_per_gpu * 1019} MiB",
            "power.draw": "69.85 W", "temperature.gpu": "41",
        }
        lines.append(", ".join(v[f] for f in fields))
    return "\n".join(lines) + "\n"


def smi_q(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    out = ["", "==============NVSMI LOG==============", "",
           f"{'Timestamp':<55}: Tue Jul 14 08:12:38 2026", f"{'Driver Version':<55}: {n.versions['nvidia_driver']}",
           f"{'CUDA Version':<55}: 12.4", "", f"{'Attached GPUs':<55}: {sku.gpus}"]

    def kv(depth: int, k: str, v: str | None = None) -> None:
        pad = " " * (4 * depth)
        out.append(f"{pad}{k}" if v is None else f"{pad}{k:<{55 - len(pad)}}: {v}")

    for i in range(sku.gpus):
        pending = "Yes" if i == 3 and "remap_pending" in n.faults else "No"
        out.append(f"GPU 00000000:{0x53 + 0x10 * i:02X}:00.0")
        kv(1, "Product Name", sku.gpu_model)
        kv(1, "Persistence Mode", "Enabled")
        kv(1, "MIG Mode"); kv(2, "Current", "Disabled"); kv(2, "Pending", "Disabled")
        kv(1, "GPU Recovery Action", "None")
        kv(1, "PCI"); kv(2, "GPU Link Info"); kv(3, "PCIe Generation"); kv(4, "Max", str(sku.pcie_gen))
        kv(4, "Current", str(sku.pcie_gen)); kv(3, "Link Width"); kv(4, "Max", "16x"); kv(4, "Current", "16x")
        kv(1, "Clocks Event Reasons"); kv(2, "Idle", "Active"); kv(2, "HW Slowdown", "Not Active")
        kv(3, "HW Thermal Slowdown", "Not Active"); kv(3, "HW Power Brake Slowdown", "Not Active")
        kv(1, "ECC Mode"); kv(2, "Current", "Enabled"); kv(2, "Pending", "Enabled")
        kv(1, "ECC Errors"); kv(2, "Volatile"); kv(3, "DRAM Uncorrectable", "0"); kv(3, "SRAM Uncorrectable Parity", "0")
        kv(2, "Aggregate"); kv(3, "DRAM Uncorrectable", "0"); kv(3, "SRAM Threshold Exceeded", "No")
        kv(1, "Remapped Rows"); kv(2, "Correctable Error", "0"); kv(2, "Uncorrectable Error", "0")
        kv(2, "Pending", pending); kv(2, "Remapping Failure Occurred", "No")
        kv(2, "Bank Remap Availability Histogram"); kv(3, "Max", "2560 bank(s)"); kv(3, "None", "0 bank(s)")
        kv(1, "Fabric"); kv(2, "State", "Completed"); kv(2, "Status", "Success")
    return "\n".join(out) + "\n"


def nvlink_s(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    speed = "26.562 GB/s" if sku.nvlinks_per_gpu == 18 else "25 GB/s"
    out = []
    for i in range(sku.gpus):
        out.append(f"GPU {i}: {sku.gpu_model} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)")
        for link in range(sku.nvlinks_per_gpu):
            down = "nvlink_down" in n.faults and i == 5 and link in (3, 4)
            out.append(f"\t Link {link}: {'<inactive>' if down else speed}")
    return "\n".join(out) + "\n"


def topo_m(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    g = [f"GPU{i}" for i in range(sku.gpus)]
    lines = ["\t" + "\t".join(g) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i, name in enumerate(g):
        cells = [" X " if j == i else f"NV{sku.nvlinks_per_gpu}" for j in range(sku.gpus)]
        lines.append(name + "\t" + "\t".join(cells) + f"\t{0 if i < 4 else 48}-{47 if i < 4 else 95}\t{i // 4}\t\tN/A")
    lines += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks"]
    return "\n".join(lines) + "\n"


def dcgm_diag_4x(n: NodeSpec, level: int = 2) -> str:
    sku = catalog.get(n.instance_type)

    def results(fail_gpu: int | None = None) -> list[dict]:
        out = []
        for i in range(sku.gpus):
            r: dict = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": "Pass"}
            if i == fail_gpu:
                r["status"] = "Fail"
                r["warnings"] = [{"warning": f"Error details: GPU {i} memory test failed: miscompare", "error_id": 71,
                                  "error_category": 4, "error_severity": 2}]
            out.append(r)
        return out

    def test(name: str, fail_gpu: int | None = None) -> dict:
        res = results(fail_gpu)
        return {"name": name, "results": res,
                "test_summary": {"status": "Fail" if any(r["status"] == "Fail" for r in res) else "Pass"}}

    cats = [{"category": "Deployment", "tests": [test("software")]}]
    if level >= 2:
        cats.append({"category": "Integration", "tests": [test("pcie")]})
        cats.append({"category": "Hardware", "tests": [test("memory", 3 if "dcgm_fail" in n.faults else None)]})
    doc = {"DCGM Diagnostic": {"test_categories": cats},
           "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                              "entities": [{"entity_id": i, "serial_num": f"165{i:010d}", "device_id": "2330"}
                                           for i in range(sku.gpus)]}],
           "metadata": {"version": "4.1.1", "Driver Version Detected": n.versions["nvidia_driver"]}}
    return json.dumps(doc, indent=2)


def kernel_log(n: NodeSpec) -> str:
    lines = ["2026-07-14T08:00:01+0000 ip-10-0-0-1 kernel: Linux version 6.1.112 (mockbuild@) #1 SMP",
             "2026-07-14T08:00:05+0000 ip-10-0-0-1 kernel: nvidia-nvswitch0: using MSI",
             "2026-07-14T08:00:06+0000 ip-10-0-0-1 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
             f"{n.versions['nvidia_driver']}"]
    for x in n.xids:
        detail = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) has been detected",
                  64: "Row Remapper Error: (0x00000002eebc4100) - All reserved rows for bank are remapped"}.get(x, "Ch 00000008")
        lines.append(f"2026-07-14T08:05:{x % 60:02d}+0000 ip-10-0-0-1 kernel: NVRM: Xid (PCI:0000:53:00): {x}, "
                     f"pid='<unknown>', name=<unknown>, {detail}")
    return "\n".join(lines) + "\n"


def fi_info(n: NodeSpec) -> str:
    """libfabric 2.x style: PCI-style domains, fabrics efa and efa-direct per device."""
    if "efa_missing" in n.faults:
        return "fi_getinfo: -61\n"
    sku = catalog.get(n.instance_type)
    blocks = []
    for d in range(sku.efa_interfaces):
        for fabric in ("efa", "efa-direct"):
            blocks.append(f"provider: efa\n    fabric: {fabric}\n    domain: rdmap{16 + d}s{27 + d}-rdm\n"
                          f"    version: 122.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA")
    return "\n".join(blocks) + "\n"


def lspci(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    count = 0 if "efa_missing" in n.faults else sku.efa_interfaces
    lines = ["00:05.0 Ethernet controller: Amazon.com, Inc. Elastic Network Adapter (ENA)"]
    lines += [f"{0x10 + d:02x}:1c.0 Ethernet controller: Amazon.com, Inc. Elastic Fabric Adapter (EFA)" for d in range(count)]
    return "\n".join(lines) + "\n"


def versions_json(n: NodeSpec) -> str:
    v = dict(n.versions)
    if "version_skew" in n.faults:
        v["nccl"] = "2.18.5"
    raw = {
        "nvidia_driver": f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v['nvidia_driver']}  Thu Oct 10 2024\n"
                         "GCC version:  gcc version 11.4.1",
        "fabric_manager": f"Fabric Manager version is : {v['fabric_manager']}",
        "cuda": f"nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release "
                f"{'.'.join(v['cuda'].split('.')[:2])}, V{v['cuda']}",
        "dcgm": f"dcgmi  version: {v['dcgm']}",
        "nccl": f"/usr/lib/x86_64-linux-gnu/libnccl.so.{v['nccl']}",
        "aws_ofi_nccl": f"NET/OFI Initializing aws-ofi-nccl {v['aws_ofi_nccl']}",
        "efa_installer": f"# EFA installer version: {v['efa_installer']}\n# Debug packages installed: no",
        "libfabric": f"fi_info: {v['libfabric']}\nlibfabric: {v['libfabric']}\nlibfabric api: 1.22",
        "kernel": v["kernel"],
    }
    return json.dumps(raw, indent=2)


def nccl_intra(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    wrong = "wrong_counts" in n.faults
    out = ["# nccl-tests version 2.13.10 nccl-headers=22105 nccl-library=22105",
           "# Collective test starting: all_reduce_perf",
           f"# nThread 1 nGpus {sku.gpus} minBytes 1073741824 maxBytes 17179869184 step: 2(factor) warmup iters: 1 "
           "iters: 20 agg iters: 1 validation: 1 graph: 0",
           "#",
           "#                                                              out-of-place                       in-place          ",
           "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
           "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
    factor = 2 * (sku.gpus - 1) / sku.gpus
    for k, size in enumerate((2**30, 2**31, 2**32, 2**33, 2**34)):
        bus = n.intra_busbw * (0.9 + 0.025 * k)
        alg = bus / factor
        t = size / (alg * 1e9) * 1e6
        w = "3" if wrong and k == 4 else "0"
        out.append(f"{size:>12} {size // 4:>13}     float     sum      -1 {t:>8.0f} {alg:>7.2f} {bus:>7.2f} {w:>6} "
                   f"{t:>8.0f} {alg:>7.2f} {bus:>7.2f} {w:>6}")
    avg = n.intra_busbw * 0.95
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.4f} ", "#",
            "# Collective test concluded: all_reduce_perf", ""]
    return "\n".join(out)


def nccl_efa_loopback(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    host = "ip-10-0-0-1"
    lines = [f"{host}:1234:1234 [0] NCCL INFO NCCL version {n.versions['nccl']}+cuda12.4"]
    if "socket_fallback" in n.faults:
        lines += [f"{host}:1234:1234 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.",
                  f"{host}:1234:1234 [0] NCCL INFO NET/Socket : Using [0]ens32:10.0.0.1<0>",
                  f"{host}:1234:1234 [0] NCCL INFO Using network Socket"]
    else:
        lines += [f"{host}:1234:1234 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl {n.versions['aws_ofi_nccl']}",
                  f"{host}:1234:1234 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct "
                  f"(found {sku.efa_interfaces} nics)",
                  f"{host}:1234:1234 [0] NCCL INFO Using network Libfabric"]
    return "\n".join(lines) + "\n"


def lustre_check(n: NodeSpec) -> str:
    if "lustre_unmounted" in n.faults:
        return "mount: \nwritable: no\n"
    return "mount: /fsx 10.0.1.23@tcp:/abcdefgh\nwritable: yes\n"


def container_gpus(n: NodeSpec) -> str:
    sku = catalog.get(n.instance_type)
    return "".join(f"GPU {i}: {sku.gpu_model} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n" for i in range(sku.gpus))


COMMANDS = {
    B.QUERY_GPU: f"nvidia-smi --query-gpu={B.QUERY_GPU_FIELDS} --format=csv",
    B.SMI_Q: "nvidia-smi -q",
    B.NVLINK_S: "nvidia-smi nvlink -s",
    B.TOPO_M: "nvidia-smi topo -m",
    B.DCGM_DIAG: "dcgmi diag -r 2 -j",
    B.KERNEL_LOG: "journalctl -k -b -o short-iso --no-pager",
    B.FI_INFO: "fi_info -p efa -t FI_EP_RDM",
    B.LSPCI_EFA: "lspci -d 1d0f:",
    B.FABRICMANAGER: "systemctl is-active nvidia-fabricmanager",
    B.LUSTRE: "findmnt -n -t lustre -o TARGET,SOURCE; probe write",
    B.CONTAINER_GPUS: "docker run --rm --gpus all nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04 nvidia-smi -L",
    B.VERSIONS: "version commands (see BUNDLE.md)",
    B.NCCL_INTRA: "all_reduce_perf -b 1G -e 16G -f 2 -g 8 -c 1",
    B.NCCL_EFA_LOOPBACK: "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO all_reduce_perf -b 1G -e 1G -g 8",
}


def node_files(n: NodeSpec) -> dict[str, str]:
    files = {
        B.QUERY_GPU: query_gpu_csv(n), B.SMI_Q: smi_q(n), B.NVLINK_S: nvlink_s(n), B.TOPO_M: topo_m(n),
        B.DCGM_DIAG: dcgm_diag_4x(n), B.KERNEL_LOG: kernel_log(n), B.FI_INFO: fi_info(n), B.LSPCI_EFA: lspci(n),
        B.FABRICMANAGER: "inactive\n" if "fabricmanager_inactive" in n.faults else "active\n",
        B.LUSTRE: lustre_check(n), B.CONTAINER_GPUS: container_gpus(n), B.VERSIONS: versions_json(n),
        B.NCCL_INTRA: nccl_intra(n), B.NCCL_EFA_LOOPBACK: nccl_efa_loopback(n),
    }
    return files


def manifest(n: NodeSpec, files: dict[str, str], started: datetime | None = None) -> B.Manifest:
    t = started or datetime(2026, 7, 14, 8, 10, tzinfo=timezone.utc)
    records = {}
    for k, name in enumerate(files):
        rc = 1 if name == B.FI_INFO and "efa_missing" in n.faults else 0
        records[name] = B.FileRecord(command=COMMANDS.get(name, name), exit_code=rc, started=t + timedelta(seconds=k),
                                     ended=t + timedelta(seconds=k + 1))
    return B.Manifest(slot=n.slot, instance_id=n.instance_id, instance_type=n.instance_type, stack=n.stack,
                      batch=n.batch, collected_by="synth", files=records)


def write_node(directory, n: NodeSpec):
    files = node_files(n)
    return B.write_bundle(directory, files, manifest(n, files))
