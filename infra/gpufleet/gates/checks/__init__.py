"""Per-node preflight checks over one in-memory bundle (no I/O), one module per subject.

Why one function per check, each citing its row of the research check list
(`gates-research.md (a) #N`): a verdict must be traceable to the rule that produced it, and a
missing file must become an explicit REMEDIATE ("not collected", retest once), never a pass.
This module holds the order the checks run in (the order of a node's results) and runs them.
"""

from __future__ import annotations

from typing import Callable

from gpufleet.gates.bundle import Bundle
from gpufleet.gates.checks.container import check_container, check_workload_image
from gpufleet.gates.checks.dcgm import check_dcgm
from gpufleet.gates.checks.efa_nccl import check_efa, check_intra_node, check_nccl_net
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.checks.fabric import check_fabric_manager, check_nvlink
from gpufleet.gates.checks.gpu import (
    check_clocks, check_ecc_mode, check_ecc_uncorrectable, check_gpu_count, check_gpu_model, check_mig, check_pcie,
    check_persistence, check_recovery_action, check_row_remap,
)
from gpufleet.gates.checks.kernel_log import check_kernel_log
from gpufleet.gates.checks.manifest import check_manifest
from gpufleet.gates.checks.readable import check_readable
from gpufleet.gates.checks.storage import check_lustre
from gpufleet.gates.checks.versions import check_versions
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult

CHECKS: tuple[Callable[[NodeEvidence, GateSettings], list[CheckResult]], ...] = (
    check_manifest, check_gpu_count, check_gpu_model, check_versions, check_persistence, check_mig, check_recovery_action,
    check_ecc_mode, check_ecc_uncorrectable, check_row_remap, check_kernel_log, check_pcie, check_nvlink,
    check_fabric_manager, check_clocks, check_dcgm, check_efa, check_nccl_net, check_lustre, check_container,
    check_workload_image, check_intra_node, check_readable,
)


def run_checks(bundle: Bundle, settings: GateSettings) -> tuple[NodeEvidence, list[CheckResult]]:
    ev = NodeEvidence(bundle)
    results: list[CheckResult] = []
    for check in CHECKS:
        results.extend(check(ev, settings))
    return ev, results
