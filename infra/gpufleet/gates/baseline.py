"""Intra-node all_reduce baseline: large-message busbw vs the SKU floor and the cohort; NCCL
correctness; "EFA really used".

Why large-message rows only: nccl-tests' `# Avg bus bandwidth` averages every size of the
sweep (52.98 on a run that peaks at 437.89 GB/s; research section 0 item 1), so it says nothing
about the link. We take the out-of-place busbw of the largest row at or above `min_bytes`.
Why a cohort median: an absolute floor catches gross faults, the median catches a node that is
slow relative to identical siblings measured in the same window (research section d).
"""

from __future__ import annotations

import re
import statistics
from typing import Mapping

from gpufleet.gates.parsers.nccl_debug import NcclNet
from gpufleet.gates.parsers.nccl_tests import PerfResult
from gpufleet.gates.verdict import CheckResult, Verdict, check_result

P, W, R, Q = Verdict.PASS, Verdict.WARN, Verdict.REMEDIATE, Verdict.QUARANTINE
GIB = 2**30


def large_message_busbw(perf: PerfResult, min_bytes: int = GIB) -> float | None:
    """Out-of-place busbw (GB/s) of the largest row with size >= min_bytes; None when no such row."""
    rows = [r for r in perf.rows if r.size >= min_bytes and r.out_of_place.busbw is not None]
    if not rows:
        return None
    return max(rows, key=lambda r: r.size).out_of_place.busbw


def check_floor(busbw: float | None, floor: float, check_id: str = "nccl.intra.busbw",
                research_ref: str = "gates-research.md (a) #34, (b)") -> CheckResult:
    expected = f">= {floor:g} GB/s"
    if busbw is None:
        return check_result(check_id=check_id, severity="Q", measured="no row >= the baseline size", expected=expected,
                           verdict=R, reason_code="busbw-not-measured",
                           message="no large-message row to gate on; rerun at the baseline size",
                           research_ref=research_ref)
    if busbw < floor:
        return check_result(check_id=check_id, severity="Q", measured=f"{busbw:g} GB/s", expected=expected,
                           verdict=Q, reason_code="busbw-below-floor",
                           message=f"all_reduce busbw {busbw:g} GB/s below the floor {floor:g}",
                           research_ref=research_ref)
    return check_result(check_id=check_id, severity="Q", measured=f"{busbw:g} GB/s", expected=expected, verdict=P,
                       research_ref=research_ref)


def check_correctness(perf: PerfResult, check_id: str = "nccl.intra.correctness") -> CheckResult:
    """#wrong = 0 on every row and `# Out of bounds values : 0 OK` (research (a) #35)."""
    rref, expected = "gates-research.md (a) #35", "#wrong 0 on every row, out of bounds 0"
    wrong_rows = [r.size for r in perf.rows for h in (r.out_of_place, r.in_place)
                  if h is not None and h.wrong is not None and h.wrong > 0]
    if wrong_rows:
        return check_result(check_id=check_id, severity="Q", measured=f"#wrong > 0 at sizes {sorted(set(wrong_rows))}",
                           expected=expected, verdict=Q, reason_code="nccl-wrong-results",
                           message="nccl-tests found wrong results", research_ref=rref)
    if perf.out_of_bounds or perf.out_of_bounds_ok is False:
        return check_result(check_id=check_id, severity="Q", measured=f"out of bounds {perf.out_of_bounds}",
                           expected=expected, verdict=Q, reason_code="nccl-out-of-bounds",
                           message="nccl-tests reported out-of-bounds values", research_ref=rref)
    if not perf.rows:
        return check_result(check_id=check_id, severity="Q", measured="no rows", expected=expected, verdict=R,
                           reason_code="nccl-no-results", message="; ".join(perf.problems) or "no result rows",
                           research_ref=rref)
    if perf.wrong_total is None and not any(r.out_of_place.error is not None for r in perf.rows):
        return check_result(check_id=check_id, severity="Q", measured="#wrong N/A (run with -c 0)", expected=expected,
                           verdict=R, reason_code="nccl-unchecked",
                           message="results were not checked; rerun with -c 1", research_ref=rref)
    if perf.nccl_warnings:
        return check_result(check_id=check_id, severity="Q", measured=perf.nccl_warnings[0][:120], expected=expected,
                           verdict=R, reason_code="nccl-warn", message="NCCL printed WARN lines", research_ref=rref)
    note = "" if perf.out_of_bounds is not None else "no out-of-bounds footer in the output"
    return check_result(check_id=check_id, severity="Q", measured="#wrong 0", expected=expected, verdict=P,
                       message=note, research_ref=rref)


def check_efa_used(net: NcclNet | None, check_id: str = "efa.nccl_net", file_name: str = "nccl output") -> CheckResult:
    """NCCL_DEBUG=INFO must show the libfabric network with the efa provider.

    Quarantine needs positive evidence: NCCL chose sockets or another network, or libfabric said
    the EFA provider found nothing. A libfabric network without a provider line proves nothing
    either way (REMEDIATE: collect with NCCL_DEBUG_SUBSYS=INIT,NET and retest).
    """
    rref, expected = "gates-research.md (a) #36", "Using network (AWS) Libfabric, Selected provider efa"
    if net is None:
        return check_result(check_id=check_id, severity="Q", measured="not collected", expected=expected, verdict=R,
                           reason_code=re.sub(r"[^A-Za-z0-9._-]", "-", "missing-" + file_name.rsplit(".", 1)[0])[:63],
                           message=f"{file_name} was not collected",
                           research_ref=rref)
    measured = f"network {net.network}, provider {net.provider}, nics {net.nics}"
    if net.efa_used:
        return check_result(check_id=check_id, severity="Q", measured=measured, expected=expected, verdict=P,
                           research_ref=rref)
    if net.efa_absent is not None:
        return check_result(check_id=check_id, severity="Q", measured=f"{measured}; {net.efa_absent}",
                           expected=expected, verdict=Q, reason_code="efa-provider-empty",
                           message="libfabric's EFA provider found no device (fi_getinfo: provider efa output "
                                   "empty list); NCCL cannot have used EFA", research_ref=rref)
    if net.socket_fallback:
        return check_result(check_id=check_id, severity="Q", measured=measured, expected=expected, verdict=Q,
                           reason_code="efa-socket-fallback",
                           message="NCCL moved data over TCP sockets (no usable libfabric/EFA net plugin)",
                           research_ref=rref)
    if net.network is not None and not net.libfabric:
        return check_result(check_id=check_id, severity="Q", measured=measured, expected=expected, verdict=Q,
                           reason_code="efa-not-used", message=f"NCCL used network {net.network}, not libfabric/EFA",
                           research_ref=rref)
    if net.lines == 0:
        return check_result(check_id=check_id, severity="Q", measured="no NCCL INFO lines", expected=expected,
                           verdict=R, reason_code="nccl-debug-missing",
                           message="run with NCCL_DEBUG=INFO to prove the network", research_ref=rref)
    if net.provider is not None and not net.provider.startswith("efa"):
        return check_result(check_id=check_id, severity="Q", measured=measured, expected=expected, verdict=Q,
                           reason_code="efa-not-used", message=f"aws-ofi-nccl selected provider {net.provider}, not efa",
                           research_ref=rref)
    what = "provider unproven" if net.libfabric else "network and provider unproven"
    return check_result(check_id=check_id, severity="Q", measured=measured, expected=expected, verdict=R,
                       reason_code="efa-provider-unproven",
                       message=f"{what}: no 'Selected provider is efa' line; rerun with NCCL_DEBUG=INFO "
                               "NCCL_DEBUG_SUBSYS=INIT,NET", research_ref=rref)


def cohort_outliers(busbw: Mapping[str, float], fraction: float, min_size: int = 3,
                    check_id: str = "nccl.intra.cohort") -> dict[str, CheckResult]:
    """Below median x (1 - fraction) -> REMEDIATE (retest once; a repeat quarantines).

    Why REMEDIATE and not QUARANTINE: performance outliers flake (research section d item 5);
    one retest suppresses a flake, a second miss quarantines through the retest rule.
    """
    rref = "gates-research.md (d) item 3"
    values = [v for v in busbw.values()]
    if len(values) < min_size:
        return {n: check_result(check_id=check_id, severity="R", measured=f"{v:g} GB/s",
                               expected=f"cohort of >= {min_size} nodes", verdict=P,
                               message=f"cohort of {len(values)} is too small for a relative gate",
                               research_ref=rref) for n, v in busbw.items()}
    median = statistics.median(values)
    limit = median * (1 - fraction)
    out = {}
    for node, v in busbw.items():
        expected = f">= {limit:.2f} GB/s (median {median:.2f} x {1 - fraction:g})"
        if v < limit:
            out[node] = check_result(check_id=check_id, severity="R", measured=f"{v:g} GB/s", expected=expected,
                                    verdict=R, reason_code="busbw-outlier",
                                    message=f"busbw {v:g} is {100 * (1 - v / median):.1f}% below the cohort median",
                                    research_ref=rref)
        else:
            out[node] = check_result(check_id=check_id, severity="R", measured=f"{v:g} GB/s", expected=expected,
                                    verdict=P, research_ref=rref)
    return out
