"""Simulated clouds on small stacks in temporary projects, each Pulumi program captured once.

Why a temporary project: the simulator keeps its state under `<project>/.gpufleet/<stack>/sim/`;
tests must neither share state nor write into the checkout. Why a capture cache: running the real
program under mocks costs seconds; a cloud opened on the same spec reads the cached capture, as a
resumed rollout does.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from gpufleet.plan import build_plan
from gpufleet.project import Project, load_project
from gpufleet.sim import SimulatedCloud
from gpufleet.sim import world as W
from gpufleet.sim.cloud import captured_instances, program_cache_key
from gpufleet.spec import ClusterSpec, load_stack_path

REPO = Path(__file__).resolve().parents[2]
GATED_KINDS = ("ecc-uncorrectable", "row-remap-failure", "row-remap-pending", "xid-79", "xid-48", "xid-64", "xid-74",
               "xid-119", "nvlink-down", "efa-missing", "slow-nvlink", "bad-nic", "version-skew", "unreachable",
               "configure-failed", "image-missing")
# the field's quirks (issue 19): the gates' verdicts on them are measured by bench/bench_field.py
QUIRK_KINDS = ("fabric-unhealthy", "fabric-degraded-bandwidth", "fabric-in-progress", "fabric-insufficient-resources",
               "output-unreadable", "xid-mig", "tool-missing", "nic-count-short", "plugin-beta")
LATENT_KINDS = ("latent",)
ALL_KINDS = GATED_KINDS + QUIRK_KINDS + LATENT_KINDS
WORKLOAD_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests@sha256:" + "5e" * 32  # image-missing needs a pinned image
_programs: dict[str, dict] = {}


def make_spec(target_gpus: int = 320, **simulator: Any) -> ClusterSpec:
    """The local stack at another size (default 40 nodes) with the given `gpufleet:simulator`."""
    base = load_stack_path(REPO / "stacks" / "Pulumi.local.yaml")
    raw = base.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["cluster"]["targetGpus"] = target_gpus
    units = target_gpus // raw["cluster"]["unitGpus"]
    raw["partitions"] = [{"name": "train", "mode": "data-parallel", "units": units}]
    raw["simulator"] = {"seed": 1, **simulator}
    raw.setdefault("acceptance", {})["workloadImage"] = WORKLOAD_IMAGE
    return ClusterSpec.from_raw(raw, source="test")


def make_project(root: Path) -> Project:
    """A copy of this project's Pulumi.yaml, stacks and images in `root` (state goes under it)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(REPO / "stacks", root / "stacks")
    shutil.copytree(REPO / "images", root / "images")
    return load_project(root)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path / "proj")


def open_cloud(spec: ClusterSpec, project: Project, stack: str = "local") -> SimulatedCloud:
    """SimulatedCloud.open, with the program captured once per spec for the whole session."""
    key = program_cache_key(spec, stack)
    plan = build_plan(spec)
    if key not in _programs:
        _programs[key] = captured_instances(spec, plan, stack)
    directory = project.state_dir(stack) / "sim"
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / W.PROGRAM).exists():
        W.write_program_cache(directory / W.PROGRAM, key, _programs[key])
    return SimulatedCloud.open(spec, plan, project, stack)


@pytest.fixture
def cloud_for(project: Project) -> Callable[..., SimulatedCloud]:
    def make(spec: ClusterSpec, stack: str = "local") -> SimulatedCloud:
        return open_cloud(spec, project, stack)
    return make
