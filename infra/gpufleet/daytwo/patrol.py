"""The patrol's decisions, pure: which nodes to recheck, and whether a light bundle still matches
the node's own admission.

Why these checks: they take seconds and catch what develops on a running node (research (a)):
GPUs gone from nvidia-smi, uncorrectable ECC, row remapping pending or failed, Xid and SXid lines
since the last patrol, NVLinks down, EFA devices missing, the fabric manager stopped. The short
intra-node all-reduce is compared with the node's OWN admission busbw (not the SKU floor): a
node that lost more than the stack's regression fraction since it was admitted is degraded even
when it is still above the floor. The patrol never remediates; a failing node is quarantined with
its reason, and the pool blacklists a slot at its `failuresBeforeBlacklist`-th failure.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from gpufleet.gates import baseline
from gpufleet.gates import bundle as B
from gpufleet.gates.checks.efa_nccl import check_efa
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.checks.fabric import check_fabric_manager, check_nvlink
from gpufleet.gates.checks.gpu import check_ecc_uncorrectable, check_gpu_count, check_row_remap
from gpufleet.gates.checks.kernel_log import check_kernel_log
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, Verdict
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.protocol import NodeState, PoolState

PATROL_FILES = (B.QUERY_GPU, B.REMAPPED_ROWS, B.SMI_Q, B.NVLINK_S, B.KERNEL_LOG, B.FI_INFO, B.LSPCI_EFA,
                B.FABRICMANAGER, B.NCCL_INTRA)
PATROL_CHECKS = (check_gpu_count, check_ecc_uncorrectable, check_row_remap, check_kernel_log, check_nvlink,
                 check_fabric_manager, check_efa)
FAILING = (Verdict.REMEDIATE, Verdict.QUARANTINE)
REGRESSED = "busbw-regressed"
_ISO = re.compile(r"^\s*\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)")


@dataclass(frozen=True)
class Selection:
    idle: list[str]  # admitted and running nothing: rechecked
    busy: list[str]  # admitted and running work: never touched


def select(state: PoolState) -> Selection:
    admitted = sorted((s, n) for s, n in state.nodes.items() if n.state is NodeState.ADMITTED)
    return Selection(idle=[s for s, n in admitted if not n.busy], busy=[s for s, n in admitted if n.busy])


def _stamp(text: str) -> datetime | None:
    m = _ISO.match(text)
    if not m:
        return None
    raw = m.group(1).replace(" ", "T").replace("Z", "+00:00")
    if re.search(r"[+-]\d{4}$", raw):
        raw = raw[:-2] + ":" + raw[-2:]
    try:
        t = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def since_filter(text: str, since: datetime | None) -> str:
    """Kernel log lines at or after `since`. A line without a readable ISO time is kept: the patrol
    would rather recheck an old Xid than miss a new one."""
    if since is None:
        return text
    kept = []
    for line in text.splitlines(keepends=True):
        t = _stamp(line)
        if t is None or t >= since:
            kept.append(line)
    return "".join(kept)


@dataclass(frozen=True)
class PatrolResult:
    slot: str
    passed: bool
    reason_code: str | None
    reason: str
    checks: tuple[CheckResult, ...]
    busbw_gbs: float | None
    baseline_gbs: float | None  # the admission record's intra-node busbw (None: no record, the floor is used)
    warnings: tuple[str, ...] = ()


def judge(bundle: B.Bundle, settings: GateSettings, baseline_gbs: float | None, regression_fraction: float,
          since: datetime | None) -> PatrolResult:
    """The light checks on one node's patrol bundle, then its busbw against its own admission."""
    files = dict(bundle.files)
    if B.KERNEL_LOG in files:
        files[B.KERNEL_LOG] = since_filter(files[B.KERNEL_LOG], since)
    ev = NodeEvidence(dataclasses.replace(bundle, files=files))
    results: list[CheckResult] = []
    for check in PATROL_CHECKS:
        results.extend(check(ev, settings))
    busbw = None
    if ev.intra is not None:
        results.append(baseline.check_correctness(ev.intra))
        busbw = baseline.large_message_busbw(ev.intra, settings.baseline_min_bytes)
    results.append(_against_admission(busbw, baseline_gbs, regression_fraction, settings.intra_floor))
    failing = [r for r in results if r.verdict in FAILING]
    warnings = tuple(f"{r.check_id}: {r.message or r.measured}" for r in results if r.verdict is Verdict.WARN)
    if not failing:
        return PatrolResult(bundle.slot, True, None, "", tuple(results), busbw, baseline_gbs, warnings)
    worst = max(failing, key=lambda r: r.verdict.rank)
    reason = "; ".join(f"{r.check_id}: {r.message or r.measured}" for r in failing)
    return PatrolResult(bundle.slot, False, worst.reason_code or "patrol-failed", reason, tuple(results), busbw,
                        baseline_gbs, warnings)


def _against_admission(busbw: float | None, admitted: float | None, fraction: float, floor: float) -> CheckResult:
    ref = "gates-research.md (a) #34; DESIGN.md section 6 (patrol)"
    if admitted is None:
        expected, bar = f">= {floor:g} GB/s (the SKU floor: no admission busbw on record)", floor
    else:
        bar = round(admitted * (1 - fraction), 2)
        expected = f">= {bar:g} GB/s ({fraction:.0%} under its admission busbw {admitted:g})"
    if busbw is None:
        return CheckResult(check_id="patrol.busbw", severity="Q", measured="not measured", expected=expected,
                           verdict=Verdict.QUARANTINE, reason_code="busbw-not-measured",
                           message="the short intra-node all-reduce gave no large-message row", research_ref=ref)
    if busbw >= bar:
        return CheckResult(check_id="patrol.busbw", severity="Q", measured=f"{busbw:g} GB/s", expected=expected,
                           verdict=Verdict.PASS, research_ref=ref)
    code = REGRESSED if admitted is not None else "busbw-below-floor"
    return CheckResult(check_id="patrol.busbw", severity="Q", measured=f"{busbw:g} GB/s", expected=expected,
                       verdict=Verdict.QUARANTINE, reason_code=code,
                       message=f"intra-node busbw {busbw:g} GB/s, under {bar:g}", research_ref=ref)


def since_for(last_at: datetime | None, last_instance: str | None, instance_id: str,
              admitted_at: datetime | None) -> datetime | None:
    """Xid lines count from the node's last patrol (same instance), else from its admission."""
    if last_at is not None and last_instance == instance_id:
        return last_at
    return admitted_at


def light_commands(gpus: int, since: datetime | None, nccl_tests_dir: str = "/opt/nccl-tests/build") -> list[dict]:
    """preflight.yml's `gpufleet_commands` for a patrol: the light files only, the kernel log since
    the oldest `since` of the run (the patrol filters each node's lines again), a short all-reduce."""
    journal = "journalctl -k -b -o short-iso --no-pager" + (f" --since '{since:%Y-%m-%d %H:%M:%S} UTC'"
                                                           if since else "")
    return [
        {"name": B.QUERY_GPU, "timeout": 60, "cmd": f"nvidia-smi --query-gpu={B.QUERY_GPU_FIELDS} --format=csv"},
        {"name": B.REMAPPED_ROWS, "timeout": 60,
         "cmd": f"nvidia-smi --query-remapped-rows={B.REMAPPED_ROWS_FIELDS} --format=csv"},
        {"name": B.SMI_Q, "timeout": 120, "cmd": "nvidia-smi -q"},
        {"name": B.NVLINK_S, "timeout": 60, "cmd": "nvidia-smi nvlink -s"},
        {"name": B.KERNEL_LOG, "timeout": 60, "cmd": f"{journal} || dmesg -T"},
        {"name": B.FI_INFO, "timeout": 60, "cmd": "fi_info -p efa -t FI_EP_RDM"},
        {"name": B.LSPCI_EFA, "timeout": 30, "cmd": "lspci -d 1d0f:"},
        {"name": B.FABRICMANAGER, "timeout": 30, "cmd": "systemctl is-active nvidia-fabricmanager"},
        {"name": B.NCCL_INTRA, "timeout": 300,
         "cmd": f"NCCL_DEBUG=INFO {nccl_tests_dir}/all_reduce_perf -b 1G -e 2G -f 2 -g {gpus} -c 1"},
    ]


def worst_first(results: Sequence[PatrolResult]) -> list[PatrolResult]:
    return sorted(results, key=lambda r: (r.passed, r.slot))


def concurrency_budget(plan: ClusterPlan, out_units: dict[str, int]) -> dict[str, int]:
    """Per partition, how many of its nodes the patrol may hold at once: the nodes of the units the
    stack lets that partition have out of service (`out_units`, the upgrade's allowance from
    `gpufleet.daytwo.upgrade_plan.limits`), at least one node. From the plan, not a fixed number:
    a partition of 80 units with 10% allowed is checked 8 units' nodes at a time, one of 4 units a
    node at a time, so the patrol never keeps more of a partition from work than an upgrade would."""
    nodes_per_unit: dict[str, int] = {}
    members: dict[str, set[int]] = {}
    for u in plan.units:
        if u.partition is not None:
            nodes_per_unit[u.partition] = max(nodes_per_unit.get(u.partition, 1), len(u.nodes))
            members.setdefault(u.partition, set()).update(u.nodes)
    return {p.name: max(1, min(len(members.get(p.name, ())) or 1,
                               out_units.get(p.name, 1) * nodes_per_unit.get(p.name, 1)))
            for p in plan.partitions}


def batches(slots: Sequence[str], partition_of: dict[str, str | None], budget: dict[str, int]) -> list[list[str]]:
    """`slots` in rounds, each holding at most `budget[p]` nodes of partition p (a node outside every
    partition counts against the smallest budget): what one patrol round takes from work at once."""
    smallest = min(budget.values(), default=1)
    rounds: list[list[str]] = []
    used: list[dict[str | None, int]] = []
    for slot in slots:
        part = partition_of.get(slot)
        cap = budget.get(part, smallest) if part is not None else smallest
        for i, counts in enumerate(used):
            if counts.get(part, 0) < cap:
                counts[part] = counts.get(part, 0) + 1
                rounds[i].append(slot)
                break
        else:
            used.append({part: 1})
            rounds.append([slot])
    return rounds
