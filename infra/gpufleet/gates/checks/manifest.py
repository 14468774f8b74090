"""The bundle's manifest: without it nobody knows how the files were produced."""

from __future__ import annotations

from gpufleet.gates.checks.common import P, R, result
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult


def check_manifest(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """A bundle whose manifest.json is missing or unusable is gated on its files (slot = folder
    name) but cannot be admitted: without the manifest nobody knows how the files were produced."""
    cid, rref = "bundle.manifest", "infra/gpufleet/gates/BUNDLE.md (manifest.json)"
    problem = ev.bundle.manifest_problem
    if problem is None:
        return [result(cid, "R", "valid", "a valid manifest.json", P, None, "", rref)]
    code = "missing-manifest" if problem == "manifest.json missing" else "bad-manifest"
    return [result(cid, "R", problem, "a valid manifest.json", R, code, f"{problem}; collect the bundle again", rref)]
