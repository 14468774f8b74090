"""The metric names the monitoring rules read, and the DCGM exporter counters file that makes them exist.

Why a file of its own: the names are facts about two exporters, checked once against their sources;
the rules, the counters file and the test's stub exporter all take them from here.

DCGM exporter: a field is a metric only when the exporter's counters file lists it; the file
gpufleet deploys is `gpufleet.monitoring.counters.deployed_csv` (NVIDIA's defaults with these fields
switched on). The clock-event field is DCGM_FI_DEV_CLOCKS_EVENT_REASONS (field 112;
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3, the BOM pins 4.x), an NVML clocks-event bitmask.

node_exporter: `up` per scrape job, the filesystem collector's `node_filesystem_size_bytes`
(labels fstype, mountpoint) and the infiniband collector, which reads EFA devices (`rdmap*`) from
/sys/class/infiniband: `node_infiniband_port_errors_received_total`, `node_infiniband_state_id`
(4 = ACTIVE).
"""

from __future__ import annotations

from typing import NamedTuple

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
XID = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
REMAPPED_UNCORRECTABLE = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
NVLINK_CRC_FLIT = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
CLOCK_EVENTS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
CLOCK_THROTTLE_LEGACY = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"  # the same field 112 before DCGM 3.3

NODE_FS_SIZE = "node_filesystem_size_bytes"
EFA_RX_ERRORS = "node_infiniband_port_errors_received_total"
EFA_PORT_STATE = "node_infiniband_state_id"
EFA_DEVICE_RE = "rdmap.*"
PORT_ACTIVE = 4

# gpufleet's own exposition (`gpufleet ops serve` /metrics): which nodes the pool admitted, which run work
NODE_ADMITTED = "gpufleet_node_admitted"
NODE_BUSY = "gpufleet_node_busy"

DCGM_JOB = "dcgm-exporter"
NODE_JOB = "node-exporter"
GPUFLEET_JOB = "gpufleet"


class ClockEvent(NamedTuple):
    bit: int
    name: str


# NVML nvmlClocksEventReasons bits (DCGM_CLOCKS_EVENT_REASON_*): the ones that say the hardware slowed
HW_SLOWDOWN = ClockEvent(0x8, "hw_slowdown")
SW_THERMAL = ClockEvent(0x20, "sw_thermal_slowdown")
HW_THERMAL = ClockEvent(0x40, "hw_thermal_slowdown")
HW_POWER_BRAKE = ClockEvent(0x80, "hw_power_brake_slowdown")


def clock_events_field(dcgm_version: str) -> str:
    """The clock-event field's name in the BOM's DCGM (renamed in 3.3)."""
    major, minor = (int(p) for p in dcgm_version.split(".")[:2])
    return CLOCK_EVENTS if (major, minor) >= (3, 3) else CLOCK_THROTTLE_LEGACY
