"""Xid buckets for admission (research "How Xids bucket for admission").

Why our own table: NVIDIA's catalog says what to do in production; a preflight node is idle and
freshly booted, so any Xid is suspicious. Codes absent from the table default to REMEDIATE
(retest once; recurrence quarantines), which is the catalog's RESET_GPU default.
"""

from __future__ import annotations

from typing import NamedTuple

from gpufleet.gates.verdict import Verdict


class XidRule(NamedTuple):
    verdict: Verdict
    mnemonic: str  # NVIDIA's catalog mnemonic (via gpud's generated copy)


Q, R, W = Verdict.QUARANTINE, Verdict.REMEDIATE, Verdict.WARN

XID_RULES: dict[int, XidRule] = {
    # application errors: should not occur on an idle node; warn and retest
    13: XidRule(W, "ROBUST_CHANNEL_GR_EXCEPTION"),
    31: XidRule(W, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT"),
    43: XidRule(W, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR"),
    45: XidRule(W, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL"),
    68: XidRule(W, "ROBUST_CHANNEL_NVDEC0_ERROR"),
    # memory
    48: XidRule(Q, "ROBUST_CHANNEL_GPU_ECC_DBE"),
    63: XidRule(W, "INFOROM_DRAM_RETIREMENT_EVENT"),  # R when a remap is pending (see bucket())
    64: XidRule(Q, "INFOROM_DRAM_RETIREMENT_FAILURE"),
    92: XidRule(W, "EXCESSIVE_SBE_INTERRUPTS"),
    94: XidRule(W, "ROBUST_CHANNEL_CONTAINED_ERROR"),
    95: XidRule(R, "ROBUST_CHANNEL_UNCONTAINED_ERROR"),
    140: XidRule(R, "UNRECOVERABLE_ECC_ERROR_ESCAPE"),
    # hardware / bus / power
    54: XidRule(Q, "SILENT_RUNNING_PWR_REDUCED_CLOCKING"),
    79: XidRule(Q, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"),
    # NVLink
    74: XidRule(R, "NVLINK_ERROR"),  # Q when an SXid is present too (see bucket())
    136: XidRule(R, "ALI_TRAINING_FAIL"),
    155: XidRule(R, "NVLINK_SW_DEFINED_ERROR"),
    # reset class
    46: XidRule(R, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR"),
    62: XidRule(R, "PMU_HALT_ERROR"),
    119: XidRule(R, "GSP_RPC_TIMEOUT"),
    120: XidRule(R, "GSP_ERROR"),
    143: XidRule(R, "GPU_INIT_ERROR"),
    151: XidRule(R, "ROBUST_CHANNEL_KEY_ROTATION_ERROR"),
    154: XidRule(R, "GPU_RECOVERY_ACTION_CHANGED"),
    156: XidRule(R, "RESOURCE_RETIREMENT_EVENT"),
    158: XidRule(R, "GPU_FATAL_TIMEOUT"),
}
DEFAULT_RULE = XidRule(R, "UNLISTED")


def bucket(xid: int, *, remap_pending: bool = False, sxid_present: bool = False) -> Verdict:
    """The preflight verdict for one Xid, with the two context rules from the research table."""
    if xid == 63 and remap_pending:
        return R
    if xid == 74 and sxid_present:
        return Q
    return XID_RULES.get(xid, DEFAULT_RULE).verdict


def mnemonic(xid: int) -> str:
    return XID_RULES.get(xid, DEFAULT_RULE).mnemonic
