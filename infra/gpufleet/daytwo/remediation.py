"""The remediation ladder: for a reason code (a gate's, an alert's, or an Xid), the steps to try in
order before a node is given up for service. Pure: the one table, and the stack's override of it.

Why a ladder and not "one reboot, then quarantine": NVIDIA's Xid catalog (r590, via gpud's
generated copy) gives each Xid an immediate action (reset the GPU, restart the OS, or call
support / run a workflow); AWS PCS and HyperPod repair by rebooting, replacing or isolating. The
steps here are those: `reset-gpu` (`nvidia-smi -r`, only with no process on the GPU),
`reboot`, `replace` (a new instance into the slot, from spares), `quarantine` (for service, with
the evidence). Every step but the last ends with the re-admission gate (`remediation_run`); a
step that fails or times out moves down the ladder. `quarantine` ends every ladder.

The Xid rows name the catalog's immediate action (`XID_IMMEDIATE_ACTION`, a test compares them
with the catalog) and the ladder follows from it (`BY_CATALOG_ACTION`). A stack overrides any
row with `gpufleet:ops.remediation: {CODE: [steps]}`; `gpufleet ops remediation -s STACK` shows
the table in force.
"""

from __future__ import annotations

from typing import Mapping

from gpufleet.errors import ConfigError

RESET, REBOOT, REPLACE, QUARANTINE = "reset-gpu", "reboot", "replace", "quarantine"
STEPS = (RESET, REBOOT, REPLACE, QUARANTINE)

# NVIDIA's immediate action (the catalog's vocabulary) -> the ladder gpufleet climbs for it
BY_CATALOG_ACTION: dict[str, tuple[str, ...]] = {
    "RESET_GPU": (RESET, REBOOT, REPLACE, QUARANTINE),
    "RESTART_APP": (RESET, REBOOT, REPLACE, QUARANTINE),  # on an idle, drained node: the GPU, then the OS
    "RESTART_BM": (REBOOT, REPLACE, QUARANTINE),
    "RESTART_VM": (REBOOT, REPLACE, QUARANTINE),
    "WORKFLOW_NVLINK_ERR": (RESET, REBOOT, REPLACE, QUARANTINE),
    "WORKFLOW_NVLINK5_ERR": (RESET, REBOOT, REPLACE, QUARANTINE),
    "WORKFLOW_XID_48": (REPLACE, QUARANTINE),  # double-bit ECC: the memory failed
    "CHECK_MECHANICALS": (QUARANTINE,),  # a person at the machine
    "CONTACT_SUPPORT": (REPLACE, QUARANTINE),
    "IGNORE": (RESET, REBOOT, REPLACE, QUARANTINE),  # the node was quarantined anyway: a reset, then the gate
}

# The catalog's immediate action for the Xids the gates and alerts name (gates/xid.py, monitoring/rules.py)
XID_IMMEDIATE_ACTION: dict[int, str] = {
    13: "RESTART_APP", 31: "RESTART_APP", 43: "IGNORE", 46: "RESET_GPU", 48: "WORKFLOW_XID_48",
    54: "CHECK_MECHANICALS", 62: "RESET_GPU", 63: "IGNORE", 64: "RESET_GPU", 68: "RESTART_APP", 74: "WORKFLOW_NVLINK_ERR",
    79: "RESTART_BM", 92: "IGNORE", 94: "RESTART_APP", 95: "RESET_GPU", 119: "RESET_GPU", 120: "RESET_GPU",
    136: "RESET_GPU", 140: "RESET_GPU", 155: "RESET_GPU",
}

# Reason codes that are not an Xid: the gates' (gates/checks) and the alerts' (monitoring/rules.py)
BY_REASON: dict[str, tuple[str, ...]] = {
    "ecc-uncorrectable": (REPLACE, QUARANTINE), "GpuEccUncorrectable": (REPLACE, QUARANTINE),
    "row-remap-failure": (REPLACE, QUARANTINE), "GpuRowRemapFailure": (REPLACE, QUARANTINE),
    "GpuRowRemapExhausted": (REPLACE, QUARANTINE),
    "row-remap-pending": (RESET, REBOOT, REPLACE, QUARANTINE),  # a GPU reset applies a pending remap
    "GpuXidFatal": (REBOOT, REPLACE, QUARANTINE), "GpuXidNeedsReset": (RESET, REBOOT, REPLACE, QUARANTINE),
    "gpu-count": (REBOOT, REPLACE, QUARANTINE),  # a GPU missing from nvidia-smi (fallen off the bus)
    "nvlink-down": (REBOOT, REPLACE, QUARANTINE), "GpuNvlinkErrors": (RESET, REBOOT, REPLACE, QUARANTINE),
    "fabric-not-ready": (REBOOT, REPLACE, QUARANTINE), "fabric-route-unhealthy": (REBOOT, REPLACE, QUARANTINE),
    "fabric-bandwidth-degraded": (REBOOT, REPLACE, QUARANTINE),
    "busbw-below-floor": (RESET, REBOOT, REPLACE, QUARANTINE), "busbw-regressed": (RESET, REBOOT, REPLACE, QUARANTINE),
    "efa-missing": (REBOOT, REPLACE, QUARANTINE), "efa-pair-fail": (REBOOT, REPLACE, QUARANTINE),
    "GpuHardwareSlowdown": (REBOOT, REPLACE, QUARANTINE),
    "unreadable-nvidia-smi-q": (RESET, REBOOT, REPLACE, QUARANTINE),
}
DEFAULT = (REBOOT, REPLACE, QUARANTINE)  # any other code: the rollout's one remediation, then a new instance


def _xid(code: str) -> int | None:
    text = code.lower().removeprefix("xid-").removeprefix("xid")
    return int(text) if code.lower().startswith("xid") and text.isdigit() else None


def check_override(override: Mapping[str, tuple[str, ...]] | None) -> dict[str, tuple[str, ...]]:
    """The stack's `gpufleet:ops.remediation`, each ladder checked: known steps, no repeats, ending in quarantine."""
    out: dict[str, tuple[str, ...]] = {}
    for code, steps in (override or {}).items():
        where = f"gpufleet:ops.remediation.{code}"
        unknown = [s for s in steps if s not in STEPS]
        if unknown or not steps:
            raise ConfigError(f"unknown remediation step(s) {unknown}" if unknown else "an empty ladder", field=where,
                              expected="steps from " + ", ".join(STEPS) + ", in order")
        if len(set(steps)) != len(steps) or steps[-1] != QUARANTINE:
            raise ConfigError(f"the ladder {list(steps)} repeats a step or does not end in quarantine", field=where,
                              expected=f"each step once, `{QUARANTINE}` last")
        out[code] = tuple(steps)
    return out


def ladder_for(code: str, override: Mapping[str, tuple[str, ...]] | None = None) -> tuple[str, ...]:
    """The steps for a reason code: the stack's override, else an Xid's catalog action, else the table."""
    over = check_override(override)
    if code in over:
        return over[code]
    xid = _xid(code)
    if xid is not None:
        return BY_CATALOG_ACTION[XID_IMMEDIATE_ACTION.get(xid, "RESET_GPU")]  # the catalog's default
    return BY_REASON.get(code, DEFAULT)


def source_of(code: str, override: Mapping[str, tuple[str, ...]] | None = None) -> str:
    """Where a row comes from, for `gpufleet ops remediation`."""
    if code in (override or {}):
        return "stack override (gpufleet:ops.remediation)"
    xid = _xid(code)
    if xid is not None:
        action = XID_IMMEDIATE_ACTION.get(xid)
        return f"NVIDIA Xid catalog: {action}" if action else "NVIDIA Xid catalog: unlisted (RESET_GPU)"
    return "gpufleet table" if code in BY_REASON else "gpufleet default"


def table(override: Mapping[str, tuple[str, ...]] | None = None) -> list[tuple[str, tuple[str, ...], str]]:
    """Every row in force: (code, steps, source), Xids first by number, then reason codes."""
    codes = [f"xid-{x}" for x in sorted(XID_IMMEDIATE_ACTION)] + sorted(BY_REASON)
    codes += sorted(set(override or {}) - set(codes))
    return [(c, ladder_for(c, override), source_of(c, override)) for c in codes]
