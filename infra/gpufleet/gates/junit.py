"""JUnit XML for gate results: one testcase per node and check, so CI shows failed gates natively.

Why QUARANTINE and REMEDIATE are failures and WARN is not: a warned node is admitted.
"""

from __future__ import annotations

from typing import Sequence

from gpufleet.gates.admission import AdmissionRecord


def render(records: Sequence[AdmissionRecord], suite: str = "gpufleet-gate") -> str:
    """The records' checks through the shared JUnit renderer (gpufleet.reports.render.junit)."""
    from gpufleet.reports.gate_document import gate_cases
    from gpufleet.reports.render.junit import render_cases

    return render_cases(gate_cases(records, suite), suite)
