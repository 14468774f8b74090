"""Containers: the container runtime sees every GPU, and the workload image is present and runs."""

from __future__ import annotations

from gpufleet.gates import bundle as B, image
from gpufleet.gates.checks.common import P, R, absent_tool, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.parsers import system
from gpufleet.gates.parsers.common import first_line
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, not_collected


def check_container(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    cid, sev, rref = "container.gpus", "R", "DESIGN.md section 9 (device plugin; container runtime sees all GPUs)"
    if not s.expect_container_runtime:
        return []
    text = ev.text(B.CONTAINER_GPUS)
    if text is None:
        return [not_collected(cid, sev, s.sku.gpus, B.CONTAINER_GPUS, rref)]
    if (absent := absent_tool(ev, cid, sev, s.sku.gpus, B.CONTAINER_GPUS, rref)) is not None:
        return [absent]
    n = len(system.parse_nvidia_smi_l(text).gpus)
    if n != s.sku.gpus:
        first = first_line(text)
        shown = f"{n}; rc={ev.bundle.get(B.CONTAINER_GPUS).exit_code}: {first[:200]}" if n == 0 and first else n
        return [result(cid, sev, shown, s.sku.gpus, R, "container-gpus", f"a container sees {n} of {s.sku.gpus} GPUs",
                       rref)]
    return [result(cid, sev, n, s.sku.gpus, P, None, "", rref)]


def check_workload_image(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    return image.workload_image_checks(ev.bundle, s.workload_image, s.sku.gpus)
