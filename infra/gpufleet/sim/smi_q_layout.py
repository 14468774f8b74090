"""The layout of one GPU's `nvidia-smi -q` section, from a real capture: every section and key in
the real order and nesting, so the simulated `-q` has the ~65 sections the tool prints, not the
handful the gates read.

Source: utkuozdemir/nvidia_gpu_exporter @e656cd81, internal/captures/
linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt (MIT licence), the GPU section of an idle
H100 80GB HBM3 SXM on driver 590.48.01 (the same capture as
tests/fixtures/real/nvidia_smi_q__h100_1gpu_drv590__nvidia_gpu_exporter_capture.txt, whose
SOURCES.md entry names it). Serials and UUIDs were masked in the capture; the renderer sets them
per GPU. Values the simulator does not model stay the capture's idle values.
"""

from __future__ import annotations

from typing import Iterator

H100_GPU_SECTION = """\
    Product Name                                       : NVIDIA H100 80GB HBM3
    Product Brand                                      : NVIDIA
    Product Architecture                               : Hopper
    Display Mode                                       : Requested functionality has been deprecated
    Display Attached                                   : Yes
    Display Active                                     : Disabled
    Persistence Mode                                   : Enabled
    Addressing Mode                                    : None
    MIG Mode
        Current                                        : Disabled
        Pending                                        : Disabled
    Accounting Mode                                    : Disabled
    Accounting Mode Buffer Size                        : 4000
    Driver Model
        Current                                        : N/A
        Pending                                        : N/A
    Serial Number                                      : 0000000000000
    GPU UUID                                           : GPU-00000000-0000-0000-0000-000000000000
    GPU PDI                                            : 0xd52bae2e458244e2
    Minor Number                                       : 0
    VBIOS Version                                      : 96.00.A5.00.01
    MultiGPU Board                                     : No
    Board ID                                           : 0x9
    Board Part Number                                  : 692-2G520-0200-000
    GPU Part Number                                    : 2330-885-A1
    FRU Part Number                                    : N/A
    Platform Info
        Chassis Serial Number                          : N/A
        Slot Number                                    : N/A
        Tray Index                                     : N/A
        Host ID                                        : N/A
        Peer Type                                      : N/A
        Module Id                                      : 7
        GPU Fabric GUID                                : N/A
    Inforom Version
        Image Version                                  : G520.0200.00.05
        OEM Object                                     : 2.1
        ECC Object                                     : 7.16
        Power Management Object                        : N/A
    Inforom BBX Object Flush
        Latest Timestamp                               : N/A
        Latest Duration                                : N/A
    GPU Operation Mode
        Current                                        : N/A
        Pending                                        : N/A
    GPU C2C Mode                                       : Disabled
    GPU Virtualization Mode
        Virtualization Mode                            : Pass-Through
        Host VGPU Mode                                 : N/A
        vGPU Heterogeneous Mode                        : N/A
    GPU Recovery Action                                : None
    GSP Firmware Version                               : 590.48.01
    IBMNPU
        Relaxed Ordering Mode                          : N/A
    PCI
        Bus                                            : 0x00
        Device                                         : 0x09
        Domain                                         : 0x0000
        Base Classcode                                 : 0x3
        Sub Classcode                                  : 0x2
        Device Id                                      : 0x233010DE
        Bus Id                                         : 00000000:00:09.0
        Sub System Id                                  : 0x16C110DE
        GPU Link Info
            PCIe Generation
                Max                                    : 5
                Current                                : 5
                Device Current                         : 5
                Device Max                             : 5
                Host Max                               : N/A
            Link Width
                Max                                    : 16x
                Current                                : 16x
        Bridge Chip
            Type                                       : N/A
            Firmware                                   : N/A
        Replays Since Reset                            : 9
        Replay Number Rollovers                        : 0
        Tx Throughput                                  : 352 KB/s
        Rx Throughput                                  : 329 KB/s
        Atomic Caps Outbound                           : FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64 
        Atomic Caps Inbound                            : N/A
    Fan Speed                                          : N/A
    Performance State                                  : P0
    Clocks Event Reasons
        Idle                                           : Active
        Applications Clocks Setting                    : Not Active
        SW Power Cap                                   : Not Active
        HW Slowdown                                    : Not Active
            HW Thermal Slowdown                        : Not Active
            HW Power Brake Slowdown                    : Not Active
        Sync Boost                                     : Not Active
        SW Thermal Slowdown                            : Not Active
        Display Clock Setting                          : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                               : 0 us
        Sync Boost                                     : 0 us
        SW Thermal Slowdown                            : 0 us
        HW Thermal Slowdown                            : 0 us
        HW Power Braking                               : 0 us
    Sparse Operation Mode                              : Disabled
    FB Memory Usage
        Total                                          : 81559 MiB
        Reserved                                       : 479 MiB
        Used                                           : 0 MiB
        Free                                           : 81081 MiB
    BAR1 Memory Usage
        Total                                          : 131072 MiB
        Used                                           : 1 MiB
        Free                                           : 131071 MiB
    Conf Compute Protected Memory Usage
        Total                                          : 0 MiB
        Used                                           : 0 MiB
        Free                                           : 0 MiB
    Compute Mode                                       : Default
    Utilization
        GPU                                            : 0 %
        Memory                                         : 0 %
        Encoder                                        : 0 %
        Decoder                                        : 0 %
        JPEG                                           : 0 %
        OFA                                            : 0 %
    Encoder Stats
        Active Sessions                                : 0
        Average FPS                                    : 0
        Average Latency                                : 0
    FBC Stats
        Active Sessions                                : 0
        Average FPS                                    : 0
        Average Latency                                : 0
    DRAM Encryption Mode
        Current                                        : N/A
        Pending                                        : N/A
    ECC Mode
        Current                                        : Enabled
        Pending                                        : Enabled
    ECC Errors
        Volatile
            SRAM Correctable                           : 0
            SRAM Uncorrectable Parity                  : 0
            SRAM Uncorrectable SEC-DED                 : 0
            DRAM Correctable                           : 0
            DRAM Uncorrectable                         : 0
        Aggregate
            SRAM Correctable                           : 0
            SRAM Uncorrectable Parity                  : 0
            SRAM Uncorrectable SEC-DED                 : 0
            DRAM Correctable                           : 0
            DRAM Uncorrectable                         : 0
            SRAM Threshold Exceeded                    : No
        Aggregate Uncorrectable SRAM Sources
            SRAM L2                                    : 0
            SRAM SM                                    : 0
            SRAM Microcontroller                       : 0
            SRAM PCIE                                  : 0
            SRAM Other                                 : 0
        Channel Repair Pending                         : No
        TPC Repair Pending                             : No
        Unrepairable Memory                            : No
    Retired Pages
        Single Bit ECC                                 : N/A
        Double Bit ECC                                 : N/A
        Pending Page Blacklist                         : N/A
    Remapped Rows
        Correctable Error                              : 0
        Uncorrectable Error                            : 0
        Pending                                        : No
        Remapping Failure Occurred                     : No
        Bank Remap Availability Histogram
            Max                                        : 2560 bank(s)
            High                                       : 0 bank(s)
            Partial                                    : 0 bank(s)
            Low                                        : 0 bank(s)
            None                                       : 0 bank(s)
    Temperature
        GPU Current Temp                               : 41 C
        GPU T.Limit Temp                               : 46 C
        GPU Shutdown T.Limit Temp                      : -8 C
        GPU Slowdown T.Limit Temp                      : -2 C
        GPU Max Operating T.Limit Temp                 : 0 C
        GPU Target Temperature                         : N/A
        Memory Current Temp                            : 48 C
        Memory Max Operating T.Limit Temp              : 0 C
    GPU Power Readings
        Average Power Draw                             : 69.85 W
        Instantaneous Power Draw                       : 69.62 W
        Current Power Limit                            : 700.00 W
        Requested Power Limit                          : 700.00 W
        Default Power Limit                            : 700.00 W
        Min Power Limit                                : 200.00 W
        Max Power Limit                                : 700.00 W
    GPU Memory Power Readings 
        Average Power Draw                             : 43.19 W
        Instantaneous Power Draw                       : N/A
    Module Power Readings
        Average Power Draw                             : N/A
        Instantaneous Power Draw                       : N/A
        Current Power Limit                            : N/A
        Requested Power Limit                          : N/A
        Default Power Limit                            : N/A
        Min Power Limit                                : N/A
        Max Power Limit                                : N/A
    Power Smoothing                                    : N/A
    Workload Power Profiles
        Requested Profiles                             : N/A
        Enforced Profiles                              : N/A
    EDPp Multiplier                                    : 100.00%
    Clocks
        Graphics                                       : 345 MHz
        SM                                             : 345 MHz
        Memory                                         : 2619 MHz
        Video                                          : 765 MHz
    Applications Clocks
        Graphics                                       : Requested functionality has been deprecated
        Memory                                         : Requested functionality has been deprecated
    Default Applications Clocks
        Graphics                                       : Requested functionality has been deprecated
        Memory                                         : Requested functionality has been deprecated
    Deferred Clocks
        Memory                                         : N/A
    Max Clocks
        Graphics                                       : 1980 MHz
        SM                                             : 1980 MHz
        Memory                                         : 2619 MHz
        Video                                          : 1545 MHz
    Max Customer Boost Clocks
        Graphics                                       : 1980 MHz
    Clock Policy
        Auto Boost                                     : N/A
        Auto Boost Default                             : N/A
    Fabric
        State                                          : Completed
        Status                                         : Success
        CliqueId                                       : 0
        ClusterUUID                                    : 00000000-0000-0000-0000-000000000000
        Health
            Summary                                    : N/A
            Bandwidth                                  : N/A
            Route Recovery in progress                 : N/A
            Route Unhealthy                            : N/A
            Access Timeout Recovery                    : N/A
            Incorrect Configuration                    : N/A
    Processes                                          : None
    Capabilities
        EGM                                            : disabled
"""


def paths(lines: list[str]) -> Iterator[tuple[tuple[str, ...], int]]:
    """(the key path by indentation, line index) of each `key : value` or section line below a
    GPU header (4 spaces a level)."""
    stack: list[str] = []
    for n, line in enumerate(lines):
        if not line.startswith("    "):
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        key = line.split(" : ", 1)[0].strip() if " : " in line else line.strip()
        stack = stack[:depth - 1] + [key]
        yield tuple(stack), n


def value_of(line: str) -> str | None:
    return line.split(" : ", 1)[1] if " : " in line else None


def overlay(section: list[str], overrides: dict[tuple[str, ...], str]) -> list[str]:
    """The layout with the GPU's own values: each key the simulator renders (`section`, one GPU's
    lines without its header) and each override replaces the layout's value at the same path."""
    ours = {p: value_of(section[n]) for p, n in paths(section)}
    ours.update(overrides)
    out = H100_GPU_SECTION.splitlines()
    for p, n in paths(out):
        v = ours.get(p)
        if v is not None and " : " in out[n]:
            out[n] = out[n].split(" : ", 1)[0] + " : " + v
    return out
