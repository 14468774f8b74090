"""Realistic raw tool output for one node, healthy or with named faults, in the real formats.

Why in the package: tests, the benchmark and the simulator need bundles that the real parsers
read exactly like real captures (the healthy H100 fields match the real 590.48.01 capture), and
one generator keeps them from drifting into agreeing only with each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from gpufleet import catalog
from gpufleet.gates import bundle as B

# What a node built from images/bom.yaml (al2023) has installed, in the BOM's key names (the
# CUDA toolkit update, the full kernel release, the kubelet and slurmd of either pool). Renderers
# below print each as its tool does; tests/gates/test_versions.py keeps this equal to
# bom_versions(<the project's BOM>, "al2023"), so a BOM bump that forgets it fails there.
DEFAULT_VERSIONS = {
    "kernel": "6.1.141-155.222.amzn2023.x86_64", "nvidia_driver": "570.172.08", "fabric_manager": "570.172.08",
    "cuda": "12.8.1", "dcgm": "4.2.3", "nccl": "2.27.5", "aws_ofi_nccl": "1.16.3", "efa_installer": "1.43.2",
    "libfabric": "2.1.0amzn5.0", "gdrcopy": "2.5.1", "containerd": "1.7.27", "nvidia_container_toolkit": "1.17.8",
    "lustre_client": "2.15.6", "kubelet": "1.33.4", "slurm": "24.11.6",
}
FAULTS = frozenset({
    "ecc_uncorrectable", "remap_pending", "remap_failure", "nvlink_down", "efa_missing", "wrong_counts",
    "socket_fallback", "fabricmanager_inactive", "version_skew", "thermal", "dcgm_fail", "lustre_unmounted",
    "gdrdma_off",
})


@dataclass(frozen=True)
class NodeSpec:
    slot: str
    instance_type: str = "p5.48xlarge"
    instance_id: str = "i-0123456789abcdef0"
    faults: frozenset[str] = frozenset()
    xids: tuple[int, ...] = ()
    intra_busbw: float = 480.0  # large-message busbw this node reaches
    versions: dict[str, str | None] = field(default_factory=lambda: dict(DEFAULT_VERSIONS))  # None: tool absent
    batch: int | None = 0
    stack: str | None = "local"
    os: str = "al2023"  # the node OS (/etc/os-release), as the BOM names it
    xid_gpu: int = 0  # the GPU index the Xids in the kernel log name (by its PCI address)


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
           "metadata": {"version": n.versions.get("dcgm") or "4.1.1", "Driver Version Detected": n.versions["nvidia_driver"]}}
    return json.dumps(doc, indent=2)


def dcgm_diag_3x(n: NodeSpec, level: int = 2) -> str:
    """`dcgmi diag -r <level> -j` of DCGM 3.x: the "DCGM GPU Diagnostic" document (the 3.3.9
    schema, NVIDIA/DCGM testing/python3/dcgm_diag_schema.json) in the nesting and test names of a
    real 3.x run (tests/fixtures/real/dcgmi_diag_r3_j__1gpu_t4_dcgm3x__ms_virtualclient.json): the
    Deployment tests one result each, the GPU tests one result per GPU with `gpu_ids` as a string."""
    sku = catalog.get(n.instance_type)

    def per_gpu(fail_gpu: int | None = None) -> list[dict]:
        out = []
        for i in range(sku.gpus):
            r: dict = {"gpu_ids": str(i), "status": "Pass"}
            if i == fail_gpu:
                r["status"] = "Fail"
                r["warnings"] = [{"warning": f"Error details: GPU {i} memory test failed: miscompare", "error_id": 71,
                                  "error_category": 4, "error_severity": 2}]
            out.append(r)
        return out

    deployment = ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
                  "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom")
    cats = [{"category": "Deployment", "tests": [{"name": t, "results": [{"status": "Pass"}]} for t in deployment]}]
    if level >= 2:
        cats.append({"category": "Integration", "tests": [{"name": "PCIe", "results": per_gpu()}]})
        cats.append({"category": "Hardware", "tests": [
            {"name": "GPU Memory", "results": per_gpu(3 if "dcgm_fail" in n.faults else None)}]})
    doc = {"DCGM GPU Diagnostic": {"test_categories": cats},
           "Driver Version Detected": n.versions["nvidia_driver"],
           "GPU Device IDs": ["2330"] * sku.gpus,
           "GPU Device Serials": {str(i): f"165{i:010d}" for i in range(sku.gpus)},
           "version": n.versions.get("dcgm") or "3.3.9"}
    return json.dumps(doc, indent=2)


def dcgm_diag(n: NodeSpec, level: int = 2) -> str:
    """The diag document of the node's DCGM: the 3.x shape before 4.0, the 4.x one from it."""
    major = (n.versions.get("dcgm") or "4").split(".")[0]
    return dcgm_diag_3x(n, level) if major == "3" else dcgm_diag_4x(n, level)


def kernel_log(n: NodeSpec) -> str:
    lines = ["2026-07-14T08:00:01+0000 ip-10-0-0-1 kernel: Linux version 6.1.112 (mockbuild@) #1 SMP",
             "2026-07-14T08:00:05+0000 ip-10-0-0-1 kernel: nvidia-nvswitch0: using MSI",
             "2026-07-14T08:00:06+0000 ip-10-0-0-1 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
             f"{n.versions['nvidia_driver']}"]
    for x in n.xids:
        detail = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) has been detected",
                  64: "Row Remapper Error: (0x00000002eebc4100) - All reserved rows for bank are remapped"}.get(x, "Ch 00000008")
        lines.append(f"2026-07-14T08:05:{x % 60:02d}+0000 ip-10-0-0-1 kernel: NVRM: Xid (PCI:0000:{0x53 + 0x10 * n.xid_gpu:02x}:00): {x}, "
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
    # `lspci -d 1d0f:` lists every Amazon device: the EBS root volume's controller and the ENA are
    # on every Nitro instance (names as pci.ids has them: tests/fixtures/real/pci_ids_amazon_*)
    lines = ["00:04.0 Non-Volatile memory controller: Amazon.com, Inc. NVMe EBS Controller",
             "00:05.0 Ethernet controller: Amazon.com, Inc. Elastic Network Adapter (ENA)"]
    lines += [f"{0x10 + d:02x}:1c.0 Ethernet controller: Amazon.com, Inc. Elastic Fabric Adapter (EFA)" for d in range(count)]
    return "\n".join(lines) + "\n"


# Real nvcc builds per CUDA toolkit update (the release notes' cuda_nvcc version): nvcc prints
# these, not the toolkit update the BOM pins. A version not listed is printed as given.
NVCC_BUILDS = {"12.4.0": "12.4.99", "12.4.1": "12.4.131", "12.6.3": "12.6.85", "12.8.0": "12.8.61",
               "12.8.1": "12.8.93", "12.9.1": "12.9.86"}
_KERNEL_SUFFIX = {"al2023": "-155.222.amzn2023.x86_64"}  # uname -r tail on AL2023; Ubuntu pins the full release
OS_RELEASE = {
    "al2023": 'NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"\n'
              'PLATFORM_ID="platform:al2023"\nPRETTY_NAME="Amazon Linux 2023.8.20250818"\n',
    "ubuntu-22.04": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
                    'VERSION="22.04.5 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n',
    "ubuntu-24.04": 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
                    'VERSION="24.04.3 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n',
}


def bom_versions(bom, os: str = "al2023") -> dict[str, str]:
    """What a node built from `bom` (an gpufleet.bom.Bom) for `os` has installed, in the BOM's key names."""
    pins = bom.component_versions(os)
    minimum = bom.for_os(os).kernel.minimum
    pins["kernel"] = minimum if "-" in minimum else minimum + _KERNEL_SUFFIX.get(os, "")
    return pins


def _mm(version: str) -> str:
    return ".".join(version.split(".")[:2])


# key -> the installed version's output, as the tool prints it (formats cited in gpufleet.gates.versions)
VERSION_OUTPUTS = {
    "nvidia_driver": lambda v: (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
                                "(dvs-builder@U16-I3-B03-4-3)  Tue Jul  8 19:40:34 UTC 2025\n"
                                "GCC version:  gcc version 11.5.0 20240719 (Red Hat 11.5.0-5) (GCC) \n"),
    "fabric_manager": lambda v: f"Fabric Manager version is : {v}\n",
    "cuda": lambda v: ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
                       "Built on Fri_Feb_21_20:23:50_PST_2025\n"
                       f"Cuda compilation tools, release {_mm(v)}, V{NVCC_BUILDS.get(v, v)}\n"
                       f"Build cuda_{_mm(v)}.r{_mm(v)}/compiler.35583870_0\n"),
    "dcgm": lambda v: f"\ndcgmi  version: {v}\n\n",
    "nccl": lambda v: f"/usr/lib64/libnccl.so.{v}\n",
    "aws_ofi_nccl": lambda v: f"NET/OFI Initializing aws-ofi-nccl {v}\n",
    "efa_installer": lambda v: (f"# EFA installer version: {v}\n# Debug packages installed: no\n"
                                "# Packages installed:\nefa-config efa-nv-peermem libfabric-aws libfabric-aws-devel "
                                "openmpi40-aws openmpi50-aws rdma-core\n"),
    "libfabric": lambda v: f"fi_info: {v}\nlibfabric: {v}\nlibfabric api: {_mm(v.split('amzn')[0])}\n",
    "gdrcopy": lambda v: f"{_mm(v)}\n",
    "containerd": lambda v: f"containerd github.com/containerd/containerd {v} 05044ec0a9a75232cad458027ca83437aae3f4da\n",
    "nvidia_container_toolkit": lambda v: (f"NVIDIA Container Toolkit CLI version {v}\n"
                                           "commit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d\n"),
    "lustre_client": lambda v: f"lfs {v}\n",
    "kubelet": lambda v: f"Kubernetes v{v}-eks-e386d34\n",
    "slurm": lambda v: f"slurm {v}\n",
    "kernel": lambda v: f"{v}\n",
}
_NOT_FOUND = {"nccl": "libnccl.so.2.*: No such file or directory", "gdrcopy": "modinfo: ERROR: Module gdrdrv not found.",
              "efa_installer": "cat: /opt/amazon/efa_installed_packages: No such file or directory",
              "aws_ofi_nccl": "libnccl-net-ofi.so: No such file or directory"}


def version_output(key: str, version: str | None) -> tuple[str, int]:
    """(output, exit code) of one version command; version None = the tool is absent."""
    if version is None:
        from gpufleet.gates.versions import BY_KEY

        tool = BY_KEY[key].command.split()[0] if key in BY_KEY else key
        return _NOT_FOUND.get(key, f"bash: line 1: {tool}: command not found") + "\n", 127 if key not in _NOT_FOUND else 1
    return VERSION_OUTPUTS[key](version), 0


def versions_json(n: NodeSpec) -> str:
    """versions.json as preflight.yml writes it: key -> {output, exit_code}, plus the node's os-release."""
    v = dict(n.versions)
    if "version_skew" in n.faults:
        v["nccl"] = "2.18.5"
    raw: dict[str, dict[str, object]] = {}
    for key, version in v.items():
        if key in VERSION_OUTPUTS:
            out, rc = version_output(key, version)
            raw[key] = {"output": out, "exit_code": rc}
    raw["os_release"] = {"output": OS_RELEASE.get(n.os, f"ID={n.os}\n"), "exit_code": 0}
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
    lines = [f"{host}:1234:1234 [0] NCCL INFO NCCL version {n.versions['nccl']}+cuda{_mm(n.versions.get('cuda') or '12.4')}"]
    if "socket_fallback" in n.faults:
        lines += [f"{host}:1234:1234 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.",
                  f"{host}:1234:1234 [0] NCCL INFO NET/Socket : Using [0]ens32:10.0.0.1<0>",
                  f"{host}:1234:1234 [0] NCCL INFO Using network Socket"]
    else:
        lines += [f"{host}:1234:1234 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl {n.versions['aws_ofi_nccl']}",
                  f"{host}:1234:1234 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct "
                  f"(found {sku.efa_interfaces} nics)",
                  f"{host}:1234:1234 [0] NCCL INFO NET/OFI Support for DMA-BUF registrations: false",
                  f"{host}:1234:1234 [0] NCCL INFO Using network Libfabric"]
        # the ring over the NIC: each rank receives from the one before it and sends to the next, on
        # its own NIC (NVIDIA/nccl net.cc's channel line; /GDRDMA when the NIC reads GPU memory)
        gdr = "" if "gdrdma_off" in n.faults else "/GDRDMA"
        per_gpu = max(1, sku.efa_interfaces // sku.gpus)
        for rank in range(sku.gpus):
            prev, nxt = (rank - 1) % sku.gpus, (rank + 1) % sku.gpus
            for channel in range(2):
                tag = f"{host}:1234:{1240 + rank} [{rank}] NCCL INFO Channel {channel:02d}/0 :"
                lines += [f"{tag} {prev}[{prev}] -> {rank}[{rank}] [receive] via NET/Libfabric/{rank * per_gpu}{gdr}",
                          f"{tag} {rank}[{rank}] -> {nxt}[{nxt}] [send] via NET/Libfabric/{rank * per_gpu}{gdr}"]
    peermem = "" if "gdrdma_off" in n.faults else "efa_nv_peermem"
    return f"gpufleet peermem: {peermem}\n" + "\n".join(lines) + "\n"


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
    B.IMAGE_LIST: "the runtime's image listing (role image_prepull, tasks/preflight.yml)",
    B.IMAGE_GPUS: "<runtime> run <workload image> nvidia-smi -L (role image_prepull, tasks/preflight.yml)",
}


def node_files(n: NodeSpec) -> dict[str, str]:
    files = {
        B.QUERY_GPU: query_gpu_csv(n), B.SMI_Q: smi_q(n), B.NVLINK_S: nvlink_s(n), B.TOPO_M: topo_m(n),
        B.DCGM_DIAG: dcgm_diag(n), B.KERNEL_LOG: kernel_log(n), B.FI_INFO: fi_info(n), B.LSPCI_EFA: lspci(n),
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


# --- the workload image (infra/gpufleet/gates/image.py): each runtime's own listing format ----------

PAUSE_IMAGE = ("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause",
               "sha256:529cf6b1b6e5b76e901abc43aee825badbd93f9c5ee5f1e316d46a83abbce5a2")
ENROOT_DIR = "/var/lib/gpufleet/enroot"  # role image_prepull's image_prepull_enroot_dir


def _config_digest(digest: str) -> str:
    """A stand-in image id (the config blob's digest) that differs from the manifest digest."""
    return "sha256:" + digest[7:][::-1]


def image_list(image: str, runtime: str, present: bool = True) -> str:
    """What the preflight's listing command prints on a node holding the pause image and,
    when `present`, the workload image (pulled by digest, so it carries no tag)."""
    repo, _, digest = image.partition("@")
    held = [(f"{PAUSE_IMAGE[0]}:3.10", PAUSE_IMAGE[0], PAUSE_IMAGE[1], 317_264)]
    if present:
        held.append((None, repo, digest, 9_876_543_210))
    if runtime == "crictl":  # cri-tools (cmd/crictl/util.go): protojson of ListImagesResponse with
        # EmitDefaultValues and a 2-space indent, so unset message fields (uid, spec) are left out
        # and the uint64 size is a string (crictl before protojson printed uid/spec as null)
        return json.dumps({"images": [
            {"id": _config_digest(d), "repoTags": [tag] if tag else [], "repoDigests": [f"{r}@{d}"],
             "size": str(size), "username": "", "pinned": tag is not None}
            for tag, r, d, size in held]}, indent=2) + "\n"
    if runtime == "ctr":  # containerd: tabwriter columns, one row per reference
        rows = [("REF", "TYPE", "DIGEST", "SIZE", "PLATFORMS", "LABELS")]
        for tag, r, d, size in held:
            kind = "application/vnd.docker.distribution.manifest.list.v2+json"
            for ref in ([tag] if tag else []) + [f"{r}@{d}", _config_digest(d)]:
                rows.append((ref, kind, d, f"{size / 2**20:.1f} MiB", "linux/amd64,linux/arm64",
                             "io.cri-containerd.image=managed"))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        return "".join(" ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + " " + row[5] + "\n" for row in rows)
    if runtime == "enroot":  # find -printf '%s\t%p\n' over the role's squashfs folder
        return "".join(f"{size}\t{ENROOT_DIR}/{d}.sqsh\n" for tag, r, d, size in held if tag is None)
    raise ValueError(f"no listing format for runtime {runtime!r}")


def image_gpus(image: str, runtime: str, gpu_model: str, gpus: int, present: bool = True) -> tuple[str, int]:
    """(`nvidia-smi -L` inside a container of the image, exit code); the runtime's error when absent."""
    if present:
        return "".join(f"GPU {i}: {gpu_model} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n"
                       for i in range(gpus)), 0
    if runtime == "enroot":
        digest = image.partition("@")[2]
        return f"[ERROR] No such file or directory: {ENROOT_DIR}/{digest}.sqsh\n", 1
    return f'ctr: image "{image}": not found\n', 1
