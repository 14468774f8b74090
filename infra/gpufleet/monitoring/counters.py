"""The DCGM exporter's counters file (its `-f` CSV) that gpufleet deploys, and a parser for that format.

Why generated from upstream's own defaults: the exporter only exports the fields its counters file
lists, and its default file ships the ECC and NVLink error counters the rules need commented out,
and has no clock-event field at all. So the deployed file is NVIDIA's `etc/default-counters.csv`
(kept verbatim below, checked against the copy in tests/ops/fixtures) with the fields the rules
read switched on: a commented upstream line is uncommented in place (its type and help are
upstream's), a field upstream does not list is appended with its DCGM field id's description
(NVIDIA/go-dcgm `pkg/dcgm/const_fields.go`). Everything that names a DCGM metric (the rules, the
Slurm role, the Kubernetes ConfigMap, the tests' stub exporter) reads it from this one file.

The format (dcgm-exporter `pkg/counters`): one `FIELD, type, help` per line, `#` starts a comment;
types are gauge, counter or label (a label field becomes a label on the others).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.errors import ConfigError
from gpufleet.monitoring import metrics as m

KINDS = ("gauge", "counter", "label")
_FIELD = re.compile(r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")

# NVIDIA/dcgm-exporter etc/default-counters.csv at 00d6d344ea4a39112b211b9ff5af3d97e0bb51c2, verbatim
# (Apache-2.0); tests/ops/test_monitoring_counters.py compares it with tests/ops/fixtures' copy.
UPSTREAM_DEFAULTS = """# Format
# If line starts with a '#' it is considered a comment
# DCGM FIELD, Prometheus metric type, help message

# Clocks
DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).

# Temperature
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP,    gauge, GPU temperature (in C).

# Power
DCGM_FI_DEV_POWER_USAGE,              gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).

# PCIE
DCGM_FI_DEV_PCIE_TX_THROUGHPUT,  counter, Total number of bytes transmitted through PCIe TX (in KB) via NVML.
DCGM_FI_DEV_PCIE_RX_THROUGHPUT,  counter, Total number of bytes received through PCIe RX (in KB) via NVML.
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.

# Utilization (the sample period varies depending on the product)
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_ENC_UTIL,      gauge, Encoder utilization (in %).
DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).

# Errors and violations
DCGM_FI_DEV_XID_ERRORS,            gauge,   Value of the last XID error encountered.
# DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration due to power constraints (in us).
# DCGM_FI_DEV_THERMAL_VIOLATION,     counter, Throttling duration due to thermal constraints (in us).
# DCGM_FI_DEV_SYNC_BOOST_VIOLATION,  counter, Throttling duration due to sync-boost constraints (in us).
# DCGM_FI_DEV_BOARD_LIMIT_VIOLATION, counter, Throttling duration due to board limit constraints (in us).
# DCGM_FI_DEV_LOW_UTIL_VIOLATION,    counter, Throttling duration due to low utilization (in us).
# DCGM_FI_DEV_RELIABILITY_VIOLATION, counter, Throttling duration due to reliability constraints (in us).

# Memory usage
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).

# ECC
# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
# DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, counter, Total number of single-bit persistent ECC errors.
# DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, counter, Total number of double-bit persistent ECC errors.

# Retired pages
# DCGM_FI_DEV_RETIRED_SBE,     counter, Total number of retired pages due to single-bit errors.
# DCGM_FI_DEV_RETIRED_DBE,     counter, Total number of retired pages due to double-bit errors.
# DCGM_FI_DEV_RETIRED_PENDING, counter, Total number of pages pending retirement.

# NVLink
# DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, Total number of NVLink flow-control CRC errors.
# DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, counter, Total number of NVLink data CRC errors.
# DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,   counter, Total number of NVLink retries.
# DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, counter, Total number of NVLink recovery errors.
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,            counter, Total number of NVLink bandwidth counters for all lanes

# VGPU License status
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status

# Remapped rows
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,   counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE,           gauge,   Whether remapping of rows has failed
"""

# Fields the rules read that upstream's defaults do not list, with go-dcgm's description of the field id
NOT_IN_DEFAULTS = {
    m.CLOCK_EVENTS: ("gauge", "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)."),
    m.CLOCK_THROTTLE_LEGACY: ("gauge", "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*)."),
}


@dataclass(frozen=True)
class Counter:
    field: str
    kind: str
    help: str

    def line(self) -> str:
        return f"{self.field}, {self.kind}, {self.help}"


@dataclass(frozen=True)
class CountersFile:
    enabled: tuple[Counter, ...]
    commented: tuple[Counter, ...]  # `# FIELD, type, help` lines: known to the file, not exported

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(c.field for c in self.enabled)

    def get(self, field: str) -> Counter:
        for c in self.enabled:
            if c.field == field:
                return c
        raise KeyError(field)


def _counter(text: str) -> Counter | None:
    parts = [p.strip() for p in text.split(",", 2)]
    if len(parts) != 3 or not _FIELD.match(parts[0]) or parts[1] not in KINDS:
        return None
    return Counter(*parts)


def parse(text: str, source: str) -> CountersFile:
    """Read a counters file; a line that is neither a comment, blank nor `FIELD, type, help` is an error."""
    enabled: list[Counter] = []
    commented: list[Counter] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            c = _counter(line.lstrip("# "))
            if c is not None:
                commented.append(c)
            continue
        c = _counter(line)
        if c is None:
            raise ConfigError(f"line {n} is not `DCGM FIELD, type, help`: {raw!r}", path=source,
                              expected=f"a DCGM_FI_ field, one of {', '.join(KINDS)}, and a help text")
        enabled.append(c)
    return CountersFile(tuple(enabled), tuple(commented))


def rule_fields(dcgm_version: str) -> tuple[str, ...]:
    """The DCGM fields the monitoring rules read, for the BOM's DCGM."""
    return (m.GPU_UTIL, m.FB_USED, m.FB_FREE, m.XID, m.ECC_DBE_VOLATILE, m.REMAPPED_UNCORRECTABLE,
            m.ROW_REMAP_FAILURE, m.NVLINK_CRC_FLIT, m.clock_events_field(dcgm_version))


def deployed_csv(dcgm_version: str) -> str:
    """Upstream's defaults with every field the rules read switched on (see the module's docstring)."""
    wanted = set(rule_fields(dcgm_version))
    lines = [f"# gpufleet: NVIDIA dcgm-exporter etc/default-counters.csv with the fields gpufleet's rules read "
             f"switched on (DCGM {dcgm_version})"]
    seen: set[str] = set()
    for raw in UPSTREAM_DEFAULTS.splitlines():
        c = _counter(raw.lstrip("# ")) if raw.startswith("#") else _counter(raw)
        if c is not None:
            seen.add(c.field)
            if raw.startswith("#") and c.field in wanted:
                lines += ["# gpufleet: switched on, the monitoring rules read it", c.line()]
                continue
        lines.append(raw)
    missing = [f for f in rule_fields(dcgm_version) if f not in seen]
    if missing:
        lines += ["", "# gpufleet: fields the rules read that the defaults do not list"]
        lines += [Counter(f, *NOT_IN_DEFAULTS[f]).line() for f in missing]
    return "\n".join(lines) + "\n"


def deployed(dcgm_version: str) -> CountersFile:
    return parse(deployed_csv(dcgm_version), "gpufleet's dcgm-exporter counters")
