"""One simulated node's preflight bundle, in the real tools' formats, written fast.

Why on top of `gpufleet.gates.synth`: one generator of real-format output keeps the simulator, the
gate tests and the benchmark from drifting apart; what synth does not render (Xid 74/119 kernel
lines, a GPU fallen off the bus, slow NVLinks, a driver that does not load) is layered here on
synth's output. Why templates: healthy nodes differ only in names and ids, so 1,250 bundles are
a handful of rendered templates plus a host-name substitution, and each file is one
open/write/close.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Mapping

from gpufleet import catalog
from gpufleet.gates import bundle as B
from gpufleet.gates import synth
from gpufleet.gates.image import image_runtime
from gpufleet.sim import nccl_text, smi_q_layout
from gpufleet.sim.faults import LATENT

SYNTH_HOST = "ip-10-0-0-1"  # the host name synth prints in kernel and NCCL lines
SYNTH_IP = "10.0.0.1<"  # and its address in NCCL socket lines
BAD_GPU = 3  # the GPU synth marks faulty; Xid lines and dropped GPUs use the same one
NVSMI_FAILED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                "latest NVIDIA driver is installed and running.\n")

# Xid text as the driver prints it (research appendix; NVIDIA Xid catalog)
XID_TEXT = {
    48: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer at partition 6, subpartition 0.",
    64: "pid='<unknown>', name=<unknown>, Row Remapper Error: (0x00000002eebc4100) - All reserved rows for bank are "
        "remapped",
    74: "pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 4(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, "
        "0x0)",
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    119: "pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU3 GSP! Expected "
         "function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
}
FAULT_XID = {"xid-48": 48, "xid-64": 64, "xid-74": 74, "xid-79": 79, "xid-119": 119}
SYNTH_FAULTS = {
    "ecc-uncorrectable": {"ecc_uncorrectable"}, "xid-48": {"ecc_uncorrectable"},
    "row-remap-failure": {"remap_failure"}, "row-remap-pending": {"remap_pending"},
    "nvlink-down": {"nvlink_down"}, "efa-missing": {"efa_missing", "socket_fallback"},
}
SLOW_NVLINK_FACTOR = 0.8  # degraded NVLinks: ~20% off the intra-node busbw, under the 0.9 floor


def healthy_intra_busbw(sku: catalog.InstanceType) -> float:
    """The catalog's floors are set at ~90% of what healthy nodes reach (research (b))."""
    return round(sku.intra_node_busbw_floor_gbs / 0.9, 1)


def nccl_code(version: str) -> str:
    """NCCL_VERSION_CODE as nccl-tests prints it: 2.27.5 -> 22705."""
    return str(nccl_text.nccl_code(version))


def skewed(version: str) -> str:
    """The previous minor release of a version (2.27.5 -> 2.26.5): the typical stale-image skew."""
    parts = version.split(".")
    if len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) > 0:
        parts[1] = str(int(parts[1]) - 1)
    else:
        parts[0] = str(max(0, int(parts[0]) - 1)) if parts[0].isdigit() else parts[0]
    return ".".join(parts)


@dataclass(frozen=True)
class NodeLook:
    """What decides a bundle's content apart from names: the template key."""

    instance_type: str
    os: str  # the node OS as the BOM names it
    versions: tuple[tuple[str, str], ...]
    fault: str | None
    systemic: str
    factor: float  # the node's bandwidth factor
    dcgm_level: int
    workload_image: str | None = None  # the stack's pinned image: the bundle gets its listing and GPU probe
    pool: str | None = None  # picks the image runtime whose listing format is rendered (gates.image.image_runtime)


@dataclass(frozen=True)
class NodeIdentity:
    slot: str
    instance_id: str
    private_ip: str
    batch: int
    block: int
    stack: str

    @property
    def hostname(self) -> str:
        return "ip-" + self.private_ip.replace(".", "-")


@dataclass
class Template:
    files: dict[str, bytes]
    exit_codes: dict[str, int]  # per file; 0 unless the tool failed
    hosted: frozenset[str]  # files that name the host
    manifest_json: str  # manifest.json with PLACEHOLDER in each of NODE_FIELDS


NODE_FIELDS = ("slot", "instance_id", "stack", "batch", "block")
PLACEHOLDER = "@@{}@@"  # stands for one node field in a manifest template; never a real value


def render_files(look: NodeLook) -> tuple[dict[str, str], dict[str, int]]:
    """The bundle's files for this look, and the exit codes that differ from 0."""
    if look.fault in LATENT:  # present, but nothing an admission check runs can see it
        look = replace(look, fault=None)
    sku = catalog.get(look.instance_type)
    versions = dict(look.versions)
    if look.fault == "plugin-beta":
        versions["aws_ofi_nccl"] = versions["aws_ofi_nccl"] + "-beta"
    faults = set(SYNTH_FAULTS.get(look.fault or "", ()))
    if look.systemic == "nccl-socket-fallback":
        faults.add("socket_fallback")
    if look.fault == "version-skew":
        versions["nccl"] = skewed(versions["nccl"])
    busbw = healthy_intra_busbw(sku) * look.factor * (SLOW_NVLINK_FACTOR if look.fault == "slow-nvlink" else 1.0)
    node = synth.NodeSpec(slot="template", instance_type=look.instance_type, faults=frozenset(faults),
                          intra_busbw=round(busbw, 2), versions=versions, os=look.os)
    files = synth.node_files(node)
    files[B.DCGM_DIAG] = synth.dcgm_diag(node, look.dcgm_level)  # the 3.x or 4.x document of the node's DCGM
    files[B.NCCL_INTRA] = nccl_intra(sku, versions, busbw)
    files[B.NCCL_INTRA_JSON] = nccl_intra_json(sku, versions, busbw)
    rc: dict[str, int] = {}
    if look.workload_image is not None:
        runtime, present = image_runtime(look.pool), look.fault != "image-missing"
        files[B.IMAGE_LIST] = synth.image_list(look.workload_image, runtime, present)
        files[B.IMAGE_GPUS], rc[B.IMAGE_GPUS] = synth.image_gpus(look.workload_image, runtime, sku.gpu_model,
                                                                 sku.gpus, present)
    if "efa_missing" in faults:
        rc[B.FI_INFO] = 1
    files[B.SMI_Q] = _with_clock_counters(files[B.SMI_Q])
    files[B.SMI_Q] = _with_real_header(files[B.SMI_Q], versions["nvidia_driver"])
    files[B.SMI_Q] = _with_fabric_health(files[B.SMI_Q], sku.nvswitch, look.fault)
    files[B.SMI_Q] = _full_q(files[B.SMI_Q], sku, versions["nvidia_driver"])
    files[B.QUERY_GPU] = _fabric_cells(files[B.QUERY_GPU], look.fault)
    files[B.FABRIC_QUERY] = fabric_query_csv(sku, look.fault)
    files[B.REMAPPED_ROWS] = remapped_rows_csv(sku, faults)
    files[B.TOPO_M] = _topo_as_printed(files[B.TOPO_M])
    files[B.KERNEL_LOG] = files[B.KERNEL_LOG].replace(
        "kernel: Linux version 6.1.112 (mockbuild@) #1 SMP",
        f"kernel: Linux version {versions['kernel']} (mockbuild@{SYNTH_HOST}) (gcc (GCC) 11.5.0, GNU ld version "
        "2.41) #1 SMP PREEMPT_DYNAMIC", 1)  # the node's own kernel, in the shape of a real boot line
    files[B.FI_INFO] = _fi_info_for(files[B.FI_INFO], versions.get("libfabric") or "", sku.efa_interfaces,
                                    look.fault == "nic-count-short")
    files[B.NCCL_EFA_LOOPBACK] = _nccl_debug_real(files[B.NCCL_EFA_LOOPBACK], versions.get("libfabric") or "",
                                                  sku.efa_interfaces, look.fault == "nic-count-short")
    if look.fault == "xid-mig":
        files[B.KERNEL_LOG] += _xid_mig_line(48)
    if look.fault == "tool-missing":
        files[B.DCGM_DIAG] = "bash: line 1: dcgmi: command not found\n"
        rc[B.DCGM_DIAG] = 127
    if look.fault == "output-unreadable":  # the collector's timeout cut -q off mid-document
        files[B.SMI_Q] = files[B.SMI_Q][:len(files[B.SMI_Q]) // 3]
    xid = FAULT_XID.get(look.fault or "")
    if xid is not None:
        files[B.KERNEL_LOG] += _xid_line(xid)
    if look.fault == "xid-79":
        _drop_gpu(files, sku)
        rc[B.NCCL_INTRA] = 1
        files[B.NCCL_INTRA_JSON] = _unfinished_json(files[B.NCCL_INTRA_JSON], keep_config=True)
    if look.fault == "slow-nvlink":
        files[B.NVLINK_S] = _slow_links(files[B.NVLINK_S])
    if look.systemic == "driver-broken":
        _driver_broken(files, rc, versions)
    return files, rc


# CUDA version nvidia-smi prints beside each driver branch (the CUDA driver API it ships: the
# real captures show 580 -> 13.0 and 590 -> 13.1; NVIDIA's CUDA toolkit release notes, table 3)
DRIVER_CUDA = {"535": "12.2", "550": "12.4", "560": "12.6", "565": "12.7", "570": "12.8", "575": "12.9",
               "580": "13.0", "590": "13.1"}


def _with_real_header(text: str, driver: str) -> str:
    """The `-q` header's CUDA Version follows the driver branch (synth prints 12.4 for any)."""
    cuda = DRIVER_CUDA.get(driver.split(".")[0])
    if cuda is None:
        return text
    return text.replace(f"{'CUDA Version':<55}: 12.4\n", f"{'CUDA Version':<55}: {cuda}\n", 1)


# Fabric > Health as driver 570+ prints it (the rows of the real driver-580 capture,
# tests/fixtures/real/nvidia_smi_q__h200_1gpu_vm_drv580__captured.txt; the values NVML's
# nvmlGpuFabricInfoV_t health mask and summary take: Healthy/Unhealthy/Limited Capacity,
# Bandwidth Full/Degraded, True/False, Incorrect Configuration None)
HEALTHY_FABRIC = {"Summary": "Healthy", "Bandwidth": "Full", "Route Recovery in progress": "False",
                  "Route Unhealthy": "False", "Access Timeout Recovery": "False", "Incorrect Configuration": "None"}
FABRIC_FAULT_STATE = {"fabric-in-progress": ("In Progress", "N/A"),
                      "fabric-insufficient-resources": ("Completed", "Insufficient Resources")}


def _health(fault: str | None) -> dict[str, str]:
    """A healthy H100 prints every health row N/A (the real H100 590 capture); a GPU whose fabric
    reports a fault fills them (NVML's health mask and summary)."""
    if fault not in ("fabric-unhealthy", "fabric-degraded-bandwidth"):
        return dict.fromkeys(HEALTHY_FABRIC, "N/A")
    h = dict(HEALTHY_FABRIC)
    if fault == "fabric-unhealthy":
        h.update({"Summary": "Unhealthy", "Route Unhealthy": "True"})
    elif fault == "fabric-degraded-bandwidth":
        h.update({"Bandwidth": "Degraded"})
    return h


def _with_fabric_health(text: str, nvswitch: bool, fault: str | None) -> str:
    """Each GPU's Fabric section with CliqueId, ClusterUUID and Health under State/Status; the
    seeded fabric fault on the bad GPU only (HGX boards: one clique, the all-zero cluster UUID)."""
    out, gpu = [], -1
    for line in text.splitlines():
        if line.startswith("GPU 00000000:"):
            gpu += 1
        stripped = line.strip()
        bad = gpu == BAD_GPU
        if stripped.startswith("State ") and out and out[-1].strip() == "Fabric" and bad and fault in FABRIC_FAULT_STATE:
            line = line.split(":")[0] + ": " + FABRIC_FAULT_STATE[fault][0]
        if stripped.startswith("Status ") and len(out) >= 2 and out[-2].strip() == "Fabric":
            if bad and fault in FABRIC_FAULT_STATE:
                line = line.split(":")[0] + ": " + FABRIC_FAULT_STATE[fault][1]
            out.append(line)
            pad = " " * 8
            na = not nvswitch
            out.append(f"{pad}{'CliqueId':<47}: {'N/A' if na else '0'}")
            out.append(f"{pad}{'ClusterUUID':<47}: {'N/A' if na else '00000000-0000-0000-0000-000000000000'}")
            out.append(f"{pad}Health")
            for k, v in _health(fault if bad else None).items():
                out.append(f"{pad}    {k:<43}: {'N/A' if na else v}")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


ARCHITECTURE = {"A100": "Ampere", "H100": "Hopper", "H200": "Hopper", "B200": "Blackwell", "L40S": "Ada Lovelace"}


def _full_q(text: str, sku: catalog.InstanceType, driver: str) -> str:
    """Every GPU section laid out as the real tool prints it (sim/smi_q_layout.py: the real H100
    capture's ~65 sections), carrying this GPU's values: what synth and the faults rendered, its
    identity (bus, minor number, UUID and serial as nvlink -s and dcgmi name them), the memory of
    the SKU, the driver's GSP firmware."""
    lines = text.splitlines()
    starts = [n for n, line in enumerate(lines) if line.startswith("GPU 00000000:")]
    if not starts:
        return text
    out = lines[:starts[0]]
    arch = next((a for m, a in ARCHITECTURE.items() if m in sku.gpu_model), "N/A")
    total = sku.hbm_gib_per_gpu * 1019  # the query CSV's memory.total (synth)
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        header = lines[start]
        bus = header.split(":")[1]  # GPU 00000000:53:00.0 -> 53
        gpu = int(bus, 16)
        index = (gpu - 0x53) // 0x10
        overrides = {("Product Architecture",): arch, ("Minor Number",): str(index), ("Module Id",): str(index + 1),
                     ("Platform Info", "Module Id"): str(index + 1),
                     ("GPU UUID",): f"GPU-{index:08d}-0000-0000-0000-000000000000",
                     ("Serial Number",): f"165{index:010d}", ("GSP Firmware Version",): driver,
                     ("PCI", "Bus"): f"0x{gpu:02X}", ("PCI", "Device"): "0x00",
                     ("PCI", "Bus Id"): header.split(" ", 1)[1],
                     ("FB Memory Usage", "Total"): f"{total} MiB", ("FB Memory Usage", "Reserved"): "479 MiB",
                     ("FB Memory Usage", "Free"): f"{total - 479} MiB"}
        out += [header, *smi_q_layout.overlay(lines[start + 1:end], overrides)]
    return "\n".join(out) + "\n"


def _fabric_cells(csv: str, fault: str | None) -> str:
    """The bad GPU's fabric.* cells in the query CSV (whichever fabric columns the collector asks)."""
    if fault not in FABRIC_FAULT_STATE and fault not in ("fabric-unhealthy", "fabric-degraded-bandwidth"):
        return csv
    lines = csv.splitlines()
    header = [h.strip() for h in lines[0].split(",")]
    want = {"fabric.state": FABRIC_FAULT_STATE.get(fault or "", ("Completed",))[0],
            "fabric.status": FABRIC_FAULT_STATE.get(fault or "", ("", "Success"))[1]}
    health = _health(fault)
    want.update({"fabric.health.summary": health["Summary"], "fabric.health.bandwidth": health["Bandwidth"],
                 "fabric.health.route_unhealthy": health["Route Unhealthy"]})
    bus = f"{0x53 + 0x10 * BAD_GPU:02X}:00.0"
    for i, line in enumerate(lines[1:], 1):
        if bus in line:
            cells = line.split(", ")
            for name, value in want.items():
                if name in header:
                    cells[header.index(name)] = value
            lines[i] = ", ".join(cells)
    return "\n".join(lines) + "\n"


TOPO_LEGEND = """\
  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # the real capture's legend, tests/fixtures/real/nvidia_smi_topo_m__h200_1gpu_vm__captured.txt


def _topo_as_printed(text: str) -> str:
    """`nvidia-smi topo -m` underlines its header row with ANSI escapes even into a file, and
    prints the whole legend (the real capture)."""
    if "Legend:" not in text or not text.startswith("\t"):
        return text
    head, rest = text.split("\n", 1)
    matrix = rest.split("\nLegend:", 1)[0]
    return f"\t\x1b[4m{head[1:]}\x1b[0m\n{matrix}\nLegend:\n\n{TOPO_LEGEND}"


def _bus(i: int) -> str:
    return f"00000000:{0x53 + 0x10 * i:02X}:00.0"


def fabric_query_csv(sku: catalog.InstanceType, fault: str | None) -> str:
    """`nvidia-smi --query-gpu=<FABRIC_QUERY_FIELDS> --format=csv` (preflight.yml): the same
    values each GPU's -q Fabric section shows; the CSV prints N/A bare, as the real driver-580
    query capture does (tests/fixtures/real/nvidia_smi_query_gpu_gates_fields__h200_drv580__captured.csv)."""
    fields = [f.strip() for f in B.FABRIC_QUERY_FIELDS.split(",")]
    health_keys = {"fabric.health.summary": "Summary", "fabric.health.bandwidth": "Bandwidth",
                   "fabric.health.route_recovery_in_progress": "Route Recovery in progress",
                   "fabric.health.route_unhealthy": "Route Unhealthy",
                   "fabric.health.access_timeout_recovery": "Access Timeout Recovery",
                   "fabric.health.incorrect_configuration": "Incorrect Configuration"}
    lines = [", ".join(fields)]
    for i in range(sku.gpus):
        bad = i == BAD_GPU
        state, status = FABRIC_FAULT_STATE.get(fault or "", ("Completed", "Success")) if bad else ("Completed",
                                                                                                   "Success")
        health = _health(fault if bad else None)
        v = {"pci.bus_id": _bus(i), "fabric.state": state, "fabric.status": status, "fabric.cliqueId": "0",
             "fabric.clusterUuid": "00000000-0000-0000-0000-000000000000",
             **{f: health[k] for f, k in health_keys.items()}}
        if not sku.nvswitch:
            v.update({f: "N/A" for f in fields if f != "pci.bus_id"})
        lines.append(", ".join(v.get(f, "N/A") for f in fields))
    return "\n".join(lines) + "\n"


def remapped_rows_csv(sku: catalog.InstanceType, faults: set[str]) -> str:
    """`nvidia-smi --query-remapped-rows=<REMAPPED_ROWS_FIELDS> --format=csv`, header and cells
    as the real driver-580 capture prints them, the bad GPU's row as synth's query CSV has it."""
    fields = [f.strip() for f in B.REMAPPED_ROWS_FIELDS.split(",")]
    lines = [", ".join(fields)]
    for i in range(sku.gpus):
        bad = i == BAD_GPU
        v = {"gpu_bus_id": _bus(i), "remapped_rows.correctable": "0",
             "remapped_rows.uncorrectable": "1" if bad and faults & {"remap_pending", "remap_failure"} else "0",
             "remapped_rows.pending": "Yes" if bad and "remap_pending" in faults else "No",
             "remapped_rows.failure": "Yes" if bad and "remap_failure" in faults else "No"}
        lines.append(", ".join(v[f] for f in fields))
    return "\n".join(lines) + "\n"


def _fi_info_for(text: str, libfabric: str, efa: int, short: bool) -> str:
    """`fi_info -p efa` as libfabric's util/info.c print_short_info prints it. `efa-direct` is a
    libfabric 2.x fabric (the EFA provider split it out in 2.0); 1.x lists `efa` alone. The
    provider version is the library's (OFI_VERSION_DEF_PROV). A NIC-short node lists half its
    SKU's devices."""
    if text.startswith("fi_getinfo"):
        return text
    blocks = text.strip("\n").split("\nprovider: ")
    blocks = [b if b.startswith("provider: ") else "provider: " + b for b in blocks]
    parts = [int(x) for x in libfabric.split("amzn")[0].split(".")[:3] if x.isdigit()]
    if len(parts) == 3:  # OFI_VERSION_DEF_PROV (include/ofi.h): major*100+minor . revision*10, as util/info.c prints it
        blocks = [re.sub(r"version: [0-9.]+", f"version: {parts[0] * 100 + parts[1]}.{parts[2] * 10}", b) for b in blocks]
    if not parts or parts[0] < 2:
        blocks = [b for b in blocks if "fabric: efa-direct" not in b]
    if short:
        keep = {f"rdmap{16 + d}s{27 + d}-rdm" for d in range(efa // 2)}
        blocks = [b for b in blocks if any(f"domain: {k}" in b for k in keep)]
    return "\n".join(blocks) + "\n"


def _nccl_debug_real(text: str, libfabric: str, efa: int, short: bool) -> str:
    """aws-ofi-nccl prints the libfabric version it loaded after its own (src/nccl_ofi_net.cpp:
    "Initializing " PACKAGE_STRING, then "Using Libfabric version %u.%u");
    NCCL names the missing plugin without a trailing period (the real 2.28.9 capture)."""
    out = []
    for line in text.splitlines():
        line = line.replace("Could not find: libnccl-net.so.", "Could not find: libnccl-net.so")
        if short:
            line = line.replace(f"(found {efa} nics)", f"(found {efa // 2} nics)")
        out.append(line)
        if "NET/OFI Initializing aws-ofi-nccl" in line and libfabric:
            major_minor = ".".join(libfabric.split("amzn")[0].split(".")[:2])  # "%u.%u" of fi_version()
            out.append(line.split(" NET/OFI ")[0] + f" NET/OFI Using Libfabric version {major_minor}")
    return "\n".join(out) + "\n"


def _xid_mig_line(xid: int) -> str:
    """The MIG form of a kernel Xid line: the GPU instance is named after the PCI address."""
    bus = 0x53 + 0x10 * BAD_GPU
    return (f"2026-07-14T08:05:{xid % 60:02d}+0000 {SYNTH_HOST} kernel: NVRM: Xid (PCI:0000:{bus:02x}:00 GPU-I:05): "
            f"{xid}, {XID_TEXT[xid]}\n")


CLOCK_COUNTERS = ("    Clocks Event Reasons Counters\n" + "".join(
    f"        {k:<47}: 0 us\n" for k in ("SW Power Capping", "Sync Boost", "SW Thermal Slowdown", "HW Thermal Slowdown",
                                       "HW Power Braking")))


INTRA_SIZES = tuple(2**30 * 2**k for k in range(5))  # -b 1G -e 16G -f 2 (playbooks/preflight.yml)
NCCL_PID = 1234
INTRA_JSON_PATH = "/var/tmp/gpufleet-preflight/.nccl-all-reduce-intra.json"  # preflight.yml's -J file
NCCL_TESTS_DIR = "/opt/nccl-tests/build"


def nccl_intra(sku: catalog.InstanceType, versions: Mapping[str, str], busbw: float) -> str:
    """The preflight's single-node all_reduce_perf -g <gpus> under NCCL_DEBUG=INFO, as nccl-tests
    2.19.6 prints it (one process drives every GPU: one Pid in the device block); large messages
    approach the node's busbw."""
    cuda = ".".join(versions["cuda"].split(".")[:2])
    tag = f"{SYNTH_HOST}:{NCCL_PID}:{NCCL_PID} [0] NCCL INFO"
    devices = [nccl_text.Device(i, NCCL_PID, SYNTH_HOST, i, 0x53 + 0x10 * i, sku.gpu_model) for i in range(sku.gpus)]
    net = [f"{tag} Bootstrap: Using ens32:{SYNTH_IP}0>", f"{tag} NCCL version {versions['nccl']}+cuda{cuda}"]
    lines = nccl_text.all_reduce(nccl_text.nccl_code(versions["nccl"]), sku.gpus, INTRA_SIZES,
                                 lambda s: busbw * (0.9 + 0.025 * INTRA_SIZES.index(s)), sku.gpus, devices,
                                 net, warmup=1, iters=20)
    return "\n".join([f"# Writing JSON output to {INTRA_JSON_PATH}", *lines])  # printf'd first under -J


def nccl_intra_json(sku: catalog.InstanceType, versions: Mapping[str, str], busbw: float) -> str:
    """The same run's `-J` document, as the collector cats it into nccl-all-reduce-intra.json."""
    first = nccl_text.Device(0, NCCL_PID, SYNTH_HOST, 0, 0x53, sku.gpu_model)
    argv = [f"{NCCL_TESTS_DIR}/all_reduce_perf", "-b", "1G", "-e", "16G", "-f", "2", "-g", str(sku.gpus), "-c", "1",
            "-J", INTRA_JSON_PATH]
    return nccl_text.all_reduce_json(argv, ["NCCL_DEBUG=INFO"], nccl_text.nccl_code(versions["nccl"]), sku.gpus,
                                     INTRA_SIZES, lambda s: busbw * (0.9 + 0.025 * INTRA_SIZES.index(s)), sku.gpus,
                                     first, "2026-07-14 08:09:12", "2026-07-14 08:10:02") + "\n"


def _with_clock_counters(text: str) -> str:
    """`nvidia-smi -q` prints the event-reason counters after the reasons (driver >= 535, as in the
    real H100 capture); an idle, healthy node has spent 0 us in each."""
    if "Clocks Event Reasons Counters" in text:
        return text
    return text.replace("\n    ECC Mode\n", "\n" + CLOCK_COUNTERS + "    ECC Mode\n")


def _xid_line(xid: int) -> str:
    bus = 0x53 + 0x10 * BAD_GPU
    return (f"2026-07-14T08:05:{xid % 60:02d}+0000 {SYNTH_HOST} kernel: NVRM: Xid (PCI:0000:{bus:02x}:00): {xid}, "
            f"{XID_TEXT[xid]}\n")


def _drop_gpu(files: dict[str, str], sku: catalog.InstanceType) -> None:
    """Xid 79: the GPU is gone from NVML, so from every nvidia-smi listing and the container."""
    bus = f"{0x53 + 0x10 * BAD_GPU:02X}:00.0"
    lines = files[B.QUERY_GPU].splitlines()
    header = [h.strip() for h in lines[0].split(",")]
    count_col = header.index("count") if "count" in header else None
    rows = []
    for line in lines[1:]:
        if bus in line:
            continue
        cells = line.split(", ")
        if count_col is not None:
            cells[count_col] = str(sku.gpus - 1)
        rows.append(", ".join(cells))
    files[B.QUERY_GPU] = "\n".join([lines[0], *rows]) + "\n"
    for name in (B.FABRIC_QUERY, B.REMAPPED_ROWS):
        files[name] = "".join(f"{line}\n" for line in files[name].splitlines() if bus not in line)
    out, skip = [], False
    for line in files[B.SMI_Q].splitlines():
        if line.startswith("GPU "):
            skip = bus in line
        if line.startswith("Attached GPUs"):
            line = line.rsplit(":", 1)[0] + f": {sku.gpus - 1}"
        if not skip:
            out.append(line)
    files[B.SMI_Q] = "\n".join(out) + "\n"
    out, skip = [], False
    for line in files[B.NVLINK_S].splitlines():
        if line.startswith("GPU "):
            skip = line.startswith(f"GPU {BAD_GPU}:")
        if not skip:
            out.append(line)
    files[B.NVLINK_S] = "\n".join(out) + "\n"
    head = files[B.NCCL_INTRA].split("# Using devices")[0]
    files[B.NCCL_INTRA] = head + "# Using devices\n" + (  # util.cu writeDeviceReport, on stderr, 2>&1
        f"Invalid number of GPUs: {sku.gpus} requested but only {sku.gpus - 1} were found.\n"
        "Please check the number of processes and GPUs per process.\n")
    for name in (B.CONTAINER_GPUS, B.IMAGE_GPUS):
        if name in files:
            files[name] = "".join(f"{line}\n" for line in files[name].splitlines()
                                  if not line.startswith(f"GPU {BAD_GPU}:"))
    doc = json.loads(files[B.DCGM_DIAG])  # DCGM diagnoses the GPUs NVML still lists
    for category in doc["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            test["results"] = [r for r in test["results"] if r.get("entity_id") != BAD_GPU]
    for group in doc["entity_groups"]:
        group["entities"] = [e for e in group["entities"] if e.get("entity_id") != BAD_GPU]
    files[B.DCGM_DIAG] = json.dumps(doc, indent=2)


def _slow_links(text: str) -> str:
    """Degraded NVLinks on one GPU: still active, at a quarter of the link rate."""
    out, gpu = [], None
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpu = int(line.split(":", 1)[0].split()[1])
        elif gpu == BAD_GPU and "GB/s" in line:
            label, speed = line.rsplit(":", 1)
            rate = float(speed.split()[0])
            line = f"{label}: {rate / 4:.3f} GB/s"
        out.append(line)
    return "\n".join(out) + "\n"


def _driver_broken(files: dict[str, str], rc: dict[str, int], versions: dict[str, str]) -> None:
    """An image whose kernel module does not match the user-space driver: nothing reaches NVML."""
    for name in (B.QUERY_GPU, B.REMAPPED_ROWS, B.FABRIC_QUERY, B.SMI_Q, B.NVLINK_S, B.TOPO_M):
        files[name] = NVSMI_FAILED
        rc[name] = 9
    files[B.KERNEL_LOG] += (
        f"2026-07-14T08:00:07+0000 {SYNTH_HOST} kernel: NVRM: API mismatch: the client has the version "
        f"{versions['nvidia_driver']}, but\n"
        f"2026-07-14T08:00:07+0000 {SYNTH_HOST} kernel: NVRM: this kernel module has the version 550.127.08.  "
        "Please\n"
        f"2026-07-14T08:00:07+0000 {SYNTH_HOST} kernel: NVRM: The NVIDIA probe routine failed for 8 device(s).\n")
    files[B.DCGM_DIAG] = ("Error: unable to establish a connection to the specified host: localhost\n"
                          "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
    rc[B.DCGM_DIAG] = 255
    files[B.FABRICMANAGER] = "failed\n"
    rc[B.FABRICMANAGER] = 3
    files[B.CONTAINER_GPUS] = ("docker: Error response from daemon: failed to create task for container: "
                               "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.\n")
    rc[B.CONTAINER_GPUS] = 125
    if B.IMAGE_GPUS in files:
        files[B.IMAGE_GPUS] = ("ctr: failed to create shim task: OCI runtime create failed: nvidia-container-cli: "
                               "initialization error: nvml error: driver not loaded: unknown\n")
        rc[B.IMAGE_GPUS] = 1
    code = nccl_code(versions["nccl"])
    files[B.NCCL_INTRA] = (f"# nccl-tests version 2.13.10 nccl-headers={code} nccl-library={code}\n"
                           "# Collective test starting: all_reduce_perf\n"
                           f"{SYNTH_HOST}: Test CUDA failure common.cu:1030 'system has unsupported display driver / "
                           f"cuda driver combination'\n .. {SYNTH_HOST} pid 1234: Test failure common.cu:891\n")
    rc[B.NCCL_INTRA] = 1
    files[B.NCCL_EFA_LOOPBACK] = files[B.NCCL_INTRA]
    rc[B.NCCL_EFA_LOOPBACK] = 1
    files[B.NCCL_INTRA_JSON] = _unfinished_json(files[B.NCCL_INTRA_JSON], keep_config=False)


def _unfinished_json(text: str, keep_config: bool) -> str:
    """The -J document of a run that failed: jsonOutputFinalize closes what was open, so it holds
    the top-level keys written before the failure (and config without devices when the device
    report failed), no results and no end_time."""
    doc = json.loads(text)
    out = {k: doc[k] for k in ("version", "start_time", "args", "env", "nccl_version")}
    if keep_config:
        out["config"] = {k: v for k, v in doc["config"].items() if k != "devices"}
    return nccl_text.dumps_c(out) + "\n"


class BundleWriter:
    """Renders and writes bundles, one template per distinct look."""

    def __init__(self) -> None:
        self._templates: dict[tuple[NodeLook, datetime], Template] = {}

    def template(self, look: NodeLook, started: datetime) -> Template:
        key = (look, started)
        t = self._templates.get(key)
        if t is None:
            files, rc = render_files(look)
            node = synth.NodeSpec(slot="template", instance_type=look.instance_type)
            m = synth.manifest(node, files, started)
            records = {name: r.model_copy(update={"exit_code": rc.get(name, 0)}) for name, r in m.files.items()}
            records[B.DCGM_DIAG] = records[B.DCGM_DIAG].model_copy(
                update={"command": f"dcgmi diag -r {look.dcgm_level} -j"})
            m = m.model_copy(update={"collected_by": "sim", "files": records})
            manifest = B.Manifest.model_validate(m.model_dump()).model_dump(mode="json", exclude_none=True)
            manifest.update({k: PLACEHOLDER.format(k) for k in NODE_FIELDS})
            t = Template(files={k: v.encode("utf-8") for k, v in files.items()},
                         exit_codes={k: rc.get(k, 0) for k in files}, hosted=frozenset(k for k, v in files.items() if SYNTH_HOST in v or SYNTH_IP in v),
                         manifest_json=json.dumps(manifest, indent=2))
            if len(self._templates) > 256:
                self._templates.clear()
            self._templates[key] = t
        return t

    def files(self, look: NodeLook, who: NodeIdentity, started: datetime) -> dict[str, bytes]:
        """The bundle's files as bytes (manifest.json included), named for this node."""
        t = self.template(look, started)
        host, ip = who.hostname.encode(), f"{who.private_ip}<".encode()
        out = {}
        for name, data in t.files.items():
            if name in t.hosted:
                data = data.replace(SYNTH_HOST.encode(), host).replace(SYNTH_IP.encode(), ip)
            out[name] = data
        out[B.MANIFEST] = self.manifest(t, who)
        return out

    def outputs(self, look: NodeLook, who: NodeIdentity, started: datetime) -> dict[str, tuple[str, int]]:
        """Bundle file name -> (output, exit code) for this node, without the manifest: what stub
        tools on a rehearsal host print, byte for byte what its bundle would hold."""
        t = self.template(look, started)
        files = self.files(look, who, started)
        return {name: (files[name].decode("utf-8"), t.exit_codes[name]) for name in t.files}

    @staticmethod
    def manifest(t: Template, who: NodeIdentity) -> bytes:
        manifest = t.manifest_json
        for key in NODE_FIELDS:
            manifest = manifest.replace(json.dumps(PLACEHOLDER.format(key)), json.dumps(getattr(who, key)))
        return manifest.encode("utf-8")

    def write(self, directory: Path, look: NodeLook, who: NodeIdentity, started: datetime) -> Path:
        """One bundle folder; each file one open/write/close, a re-run overwrites the same names."""
        directory.mkdir(parents=True, exist_ok=True)
        base = str(directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        stale = set(os.listdir(base))
        for name, data in self.files(look, who, started).items():
            fd = os.open(os.path.join(base, name), flags, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            stale.discard(name)
        for name in stale:  # a file from an earlier attempt that this one did not produce
            os.unlink(os.path.join(base, name))
        return directory


def versions_key(versions: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(versions.items()))
