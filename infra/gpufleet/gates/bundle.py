"""The raw-output bundle: the contract between collectors and the gates.

Why: whatever collects (playbooks/preflight.yml over SSH or SSM, a Slurm job, the simulator)
writes one folder per node with one file per command under a fixed name, plus a
`manifest.json` that records how each file was produced. The gates read only bundles, so the
same parsers run on real nodes, recorded fixtures and the simulator. A file that is absent is
an explicit "not collected" result, never a crash. See also infra/gpufleet/gates/BUNDLE.md.

| File | Command (as run by playbooks/preflight.yml) | Parser |
|---|---|---|
| nvidia-smi-query-gpu.csv | `nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv` | parsers.nvidia_smi.parse_query_csv |
| nvidia-smi-remapped-rows.csv | `nvidia-smi --query-remapped-rows=<REMAPPED_ROWS_FIELDS> --format=csv` | parsers.nvidia_smi.parse_query_csv |
| nvidia-smi-q.txt | `nvidia-smi -q` | parsers.nvidia_smi.parse_q |
| nvidia-smi-fabric.csv | `nvidia-smi --query-gpu=<FABRIC_QUERY_FIELDS> --format=csv` (driver 550+: fabric state and health) | parsers.nvidia_smi.read_query_table |
| nvidia-smi-nvlink-s.txt | `nvidia-smi nvlink -s` | parsers.nvidia_smi.parse_nvlink_status |
| nvidia-smi-topo-m.txt | `nvidia-smi topo -m` | parsers.nvidia_smi.parse_topo |
| dcgmi-diag.json | `dcgmi diag -r <level> -j` | parsers.dcgm.parse_diag |
| kernel-log.txt | `journalctl -k -b -o short-iso` (fallback `dmesg -T`) | parsers.kernel_log.parse_kernel_log |
| fi_info-efa.txt | `fi_info -p efa -t FI_EP_RDM` | parsers.efa.parse_fi_info |
| lspci-efa.txt | `lspci -d 1d0f:` (Amazon devices) | parsers.efa.parse_lspci |
| systemctl-fabricmanager.txt | `systemctl is-active nvidia-fabricmanager` | parsers.system.parse_systemctl_is_active |
| lustre-check.txt | `findmnt -t lustre` + write/remove a probe file (two `key: value` lines) | parsers.system.parse_lustre_check |
| container-gpus.txt | `<runtime> run --rm --gpus all <image> nvidia-smi -L` | parsers.system.parse_nvidia_smi_l |
| versions.json | one JSON object: version key -> raw stdout of its version command | parsers.system.parse_versions |
| nccl-all-reduce-intra.txt | `all_reduce_perf -b 16G -e 16G -f 2 -g 8 -c 1` (NCCL_DEBUG=INFO) | parsers.nccl_tests.parse_text |
| nccl-all-reduce-intra.json | the same run's `-J` output (nccl-tests >= 2.17.3; a note when the build has no `-J`) | parsers.nccl_tests.parse_json |
| nccl-efa-loopback.txt | `all_reduce_perf -b 1G -e 1G -g 8` with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO | parsers.nccl_debug.parse_net |
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MANIFEST = "manifest.json"
MANIFEST_FORMAT_VERSION = 1

QUERY_GPU = "nvidia-smi-query-gpu.csv"
REMAPPED_ROWS = "nvidia-smi-remapped-rows.csv"
SMI_Q = "nvidia-smi-q.txt"
FABRIC_QUERY = "nvidia-smi-fabric.csv"
NVLINK_S = "nvidia-smi-nvlink-s.txt"
TOPO_M = "nvidia-smi-topo-m.txt"
DCGM_DIAG = "dcgmi-diag.json"
KERNEL_LOG = "kernel-log.txt"
FI_INFO = "fi_info-efa.txt"
LSPCI_EFA = "lspci-efa.txt"
FABRICMANAGER = "systemctl-fabricmanager.txt"
LUSTRE = "lustre-check.txt"
CONTAINER_GPUS = "container-gpus.txt"
VERSIONS = "versions.json"
NCCL_INTRA = "nccl-all-reduce-intra.txt"
NCCL_INTRA_JSON = "nccl-all-reduce-intra.json"
NCCL_EFA_LOOPBACK = "nccl-efa-loopback.txt"

# Only when the stack pins a workload image (acceptance.workloadImage; infra/gpufleet/gates/image.py):
IMAGE_LIST = "image-list.txt"  # the runtime's full image listing (crictl/ctr/docker/podman/enroot)
IMAGE_GPUS = "image-gpus.txt"  # `nvidia-smi -L` inside a container of the workload image

BUNDLE_FILES: tuple[str, ...] = (
    QUERY_GPU, REMAPPED_ROWS, SMI_Q, FABRIC_QUERY, NVLINK_S, TOPO_M, DCGM_DIAG, KERNEL_LOG, FI_INFO, LSPCI_EFA,
    FABRICMANAGER, LUSTRE, CONTAINER_GPUS, VERSIONS, NCCL_INTRA, NCCL_INTRA_JSON, NCCL_EFA_LOOPBACK,
)

# The --query-gpu field list the checks read (header-driven parsing tolerates any order/superset).
QUERY_GPU_FIELDS = (
    "timestamp,driver_version,count,name,pci.bus_id,persistence_mode,mig.mode.current,"
    "ecc.mode.current,ecc.mode.pending,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.uncorrected.aggregate.total,ecc.errors.uncorrected.aggregate.sram.thresholdExceeded,"
    "remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure,"
    "remapped_rows.histogram.none,pcie.link.gen.current,pcie.link.gen.max,pcie.link.gen.gpumax,"
    "pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active,"
    "clocks_event_reasons_counters.hw_thermal_slowdown,clocks_event_reasons_counters.hw_power_brake_slowdown,"
    "gpu_recovery_action,fabric.state,fabric.status,memory.total,power.draw,temperature.gpu"
)
# NVLink fabric registration and health per GPU, as driver 580's `--help-query-gpu` names them
# (tests/fixtures/real/nvidia_smi_help_query_gpu__drv580__captured.txt). A query of its own: a
# driver that predates one field rejects the whole query, which must not cost the main CSV.
FABRIC_QUERY_FIELDS = (
    "pci.bus_id,fabric.state,fabric.status,fabric.cliqueId,fabric.clusterUuid,fabric.health.summary,"
    "fabric.health.bandwidth,fabric.health.route_recovery_in_progress,fabric.health.route_unhealthy,"
    "fabric.health.access_timeout_recovery,fabric.health.incorrect_configuration"
)
REMAPPED_ROWS_FIELDS = (
    "gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure"
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileRecord(_Frozen):
    """How one bundle file was produced."""

    command: str  # the exact command line as run
    exit_code: int | None = None  # None: the collector could not tell (e.g. timed out)
    started: datetime | None = None
    ended: datetime | None = None
    tool_versions: dict[str, str] = Field(default_factory=dict)


class Manifest(_Frozen):
    """manifest.json, versioned so collectors and gates can evolve separately."""

    format_version: int = MANIFEST_FORMAT_VERSION
    # node name = slot; a replacement instance takes the slot of the node it replaces. It names the
    # record file (<out>/<slot>.json), so no path separators and not '.' or '..'
    slot: str
    instance_id: str | None = None
    instance_type: str | None = None
    stack: str | None = None
    batch: int | None = None
    block: int | None = None
    collected_by: str = "unknown"  # preflight.yml, slurm, sim, ...
    files: dict[str, FileRecord] = Field(default_factory=dict)

    @field_validator("slot")
    @classmethod
    def _slot_is_a_file_name(cls, v: str) -> str:
        if not v or v in (".", "..") or any(c in v for c in "/\\\x00") or len(v) > 253:
            raise ValueError("a slot name is 1-253 characters without '/', '\\' or NUL, and not '.' or '..'")
        return v


@dataclass(frozen=True)
class Collected:
    """A file that the collector produced."""

    name: str
    text: str
    record: FileRecord | None

    @property
    def exit_code(self) -> int | None:
        return self.record.exit_code if self.record else None

    collected = True


@dataclass(frozen=True)
class NotCollected:
    """An explicit absence: the file is missing or unreadable."""

    name: str
    reason: str
    record: FileRecord | None = None

    collected = False
    text = ""

    @property
    def exit_code(self) -> int | None:
        return self.record.exit_code if self.record else None


FileResult = Collected | NotCollected


@dataclass(frozen=True)
class Bundle:
    """One node's bundle, read into memory; the checks use only this object (no I/O)."""

    path: str
    manifest: Manifest
    files: Mapping[str, str]
    problems: tuple[str, ...] = ()
    # why manifest.json could not be used (missing, not JSON, not an object, wrong field types);
    # the node is then gated with slot = folder name and gets REMEDIATE bad-manifest (checks/manifest.py)
    manifest_problem: str | None = None

    @property
    def slot(self) -> str:
        return self.manifest.slot

    def get(self, name: str) -> FileResult:
        record = self.manifest.files.get(name)
        if name in self.files:
            return Collected(name, self.files[name], record)
        return NotCollected(name, "not in the bundle" if record is None else "listed in the manifest but missing",
                            record)


class BundleError(Exception):
    """The folder is not a bundle at all (no readable manifest and no known files)."""


def write_bundle(directory: str | os.PathLike[str], files: Mapping[str, str], manifest: Manifest) -> Path:
    """Write a bundle folder: each file under its fixed name, then manifest.json.

    Why a helper: the simulator and tests must produce exactly what preflight.yml produces.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        if "/" in name or name in ("", ".", "..", MANIFEST):
            raise ValueError(f"invalid bundle file name {name!r}")
        (root / name).write_text(text, encoding="utf-8")
    (root / MANIFEST).write_text(manifest.model_dump_json(indent=2, exclude_none=True), encoding="utf-8")
    return root


_O_READ = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _read_bytes(path: str) -> bytes:
    """The whole file, as open(path, 'rb').read() gives it.

    Why not open(): a buffered file object costs an fstat, an isatty ioctl and two objects per
    file; a bundle has 16 small files and a fleet 1,000s of bundles. Reads until EOF (a short
    read is not taken for the end).
    """
    fd = os.open(path, _O_READ)
    try:
        data = os.read(fd, 1 << 16)
        if not data:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def read_bundle(directory: str | os.PathLike[str]) -> Bundle:
    """Read one node folder. A bad or missing manifest is recorded as a problem, slot = folder name."""
    root = Path(directory)
    problems: list[str] = []
    manifest, manifest_problem = _read_manifest(root / MANIFEST, problems)
    files: dict[str, str] = {}
    for entry in os.scandir(root):
        if entry.name == MANIFEST or not entry.is_file():
            continue
        try:
            # bytes + decode is cheaper than a text-mode file; the replace()s are text mode's
            # universal newlines, so parsers see the same text
            text = _read_bytes(entry.path).decode("utf-8", errors="replace")
            if "\r" in text:
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            files[entry.name] = text
        except OSError as exc:
            problems.append(f"{entry.name} unreadable: {exc}")
    if manifest is None:
        if not files and manifest_problem == "manifest.json missing":
            raise BundleError(f"{root}: neither a manifest.json nor any bundle file")
        manifest = Manifest(slot=root.name)
    return Bundle(path=str(root), manifest=manifest, files=files, problems=tuple(problems),
                  manifest_problem=manifest_problem)


def _read_manifest(mpath: Path, problems: list[str]) -> tuple[Manifest | None, str | None]:
    """(the manifest, None) or (None, what is wrong with it); never raises for a bad file."""
    if not mpath.is_file():
        problems.append("manifest.json missing")
        return None, "manifest.json missing"
    try:
        data = _read_bytes(str(mpath))
    except OSError as exc:
        problem = f"manifest.json unreadable: {exc.strerror or exc}"
        problems.append(problem)
        return None, problem
    try:
        mtext = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"manifest.json is not UTF-8 text ({exc.reason} at byte {exc.start})"
        problems.append(problem)
        return None, problem
    if "\r" in mtext:  # text mode's universal newlines, as read_text() gave
        mtext = mtext.replace("\r\n", "\n").replace("\r", "\n")
    try:
        raw = json.loads(mtext)
    except ValueError as exc:
        problem = f"manifest.json is not valid JSON: {exc}"
        problems.append(problem)
        return None, problem
    if not isinstance(raw, dict):
        problem = f"manifest.json holds {_json_kind(raw)}, expected an object with slot and files"
        problems.append(problem)
        return None, problem
    version = raw.get("format_version", MANIFEST_FORMAT_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > MANIFEST_FORMAT_VERSION:
        problems.append(f"manifest format_version {version} is newer than {MANIFEST_FORMAT_VERSION}; "
                        "reading known fields only")
        raw = {k: v for k, v in raw.items() if k in Manifest.model_fields}
    try:
        return Manifest.model_validate(raw), None
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:3])
        problem = f"manifest.json fields are invalid: {errors}"
        problems.append(problem)
        return None, problem


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}.get(
        type(value), type(value).__name__)


def find_bundles(directory: str | os.PathLike[str]) -> list[Path]:
    """Bundle folders under DIR: DIR itself when it holds a manifest, else its sub-folders that do
    (or that hold any known bundle file)."""
    root = Path(directory)
    if (root / MANIFEST).is_file():
        return [root]
    known = (MANIFEST,) + BUNDLE_FILES  # the manifest first: the usual hit
    found = []
    # os.scandir + os.stat instead of Path.iterdir/is_dir/is_file: the same answers (sorted by
    # name = Path order among siblings; pathlib's ignored errors read as "no"), a fifth of the cost
    for name in sorted(e.name for e in os.scandir(root) if _entry_is_dir(e)):
        base = os.path.join(root, name)
        if any(_is_file(os.path.join(base, n)) for n in known):
            found.append(root / name)
    return found


_PATHLIB_IGNORED = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _entry_is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return Path(entry.path).is_dir()  # pathlib's answer (or its error)


def _is_file(path: str) -> bool:
    """Path(path).is_file() without building a Path."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError as exc:
        if exc.errno in _PATHLIB_IGNORED:
            return False
        raise
    except ValueError:
        return False
