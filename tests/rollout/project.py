"""A throwaway gpufleet project for the end-to-end tests: the repository's images/ and playbooks/,
the repository's `local` stack plus the test stacks of tests/fixtures/stacks/."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE_STACKS = REPO / "tests" / "fixtures" / "stacks"


def make_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("images", "playbooks"):
        (root / name).symlink_to(REPO / name)
    stacks = root / "stacks"
    stacks.mkdir()
    shutil.copy(REPO / "stacks" / "Pulumi.local.yaml", stacks)
    for f in FIXTURE_STACKS.glob("Pulumi.*.yaml"):
        shutil.copy(f, stacks)
    return root


def seed_program_cache(src_project: Path, dst_project: Path, stack: str) -> None:
    """Reuse the Pulumi program capture of another project (same spec): it is keyed by the spec."""
    src = src_project / ".gpufleet" / stack / "sim" / "program.json"
    if src.exists():
        dst = dst_project / ".gpufleet" / stack / "sim"
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst / "program.json")
