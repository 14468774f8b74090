"""Shared by the cost tests: times on a fixed day, Kueue Workload objects, a project with one stack."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from tests.pool.conftest import small_spec

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def s(hours: float) -> float:
    return at(hours).timestamp()


def workload(name: str, ns: str = "train", *, admitted: str | None = "2026-11-01T01:00:00Z", finished: str | None = None,
             count: int = 2, gpus: str = "8", admitted_count: int | None = None, hosts: tuple[str, ...] = (),
             team: str | None = None, admitted_status: str = "True") -> dict:
    conds = []
    if admitted:
        conds.append({"type": "Admitted", "status": admitted_status, "lastTransitionTime": admitted, "reason": "Admitted"})
    if finished:
        conds.append({"type": "Finished", "status": "True", "lastTransitionTime": finished})
    assignment = {"name": "main", "count": admitted_count if admitted_count is not None else count,
                  "flavors": {"nvidia.com/gpu": "p5-48xlarge"}}
    if hosts:
        assignment["topologyAssignment"] = {"levels": ["node-restriction.kubernetes.io/gpufleet-block", "kubernetes.io/hostname"],
                                            "domains": [{"values": ["b0", h], "count": 1} for h in hosts]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "labels": {"gpufleet.io/team": team} if team else {}},
            "spec": {"queueName": ns, "podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}]},
            "status": {"conditions": conds, **({"admission": {"clusterQueue": ns, "podSetAssignments": [assignment]}}
                                                if admitted else {})}}


def project_with_stack(root: Path, name: str, *, price: float, pool: str = "slurm") -> Path:
    """A project whose stack runs a real (not simulated) pool of the pool tests' partitions
    (train, debug), priced by the stack's own rate."""
    raw = small_spec(type=pool).model_dump(by_alias=True, mode="json", exclude_none=True)
    raw.pop("simulator", None)
    raw["cost"] = {"pricePerInstanceHour": price}
    (root / "stacks").mkdir(parents=True)
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    (root / "stacks" / f"Pulumi.{name}.yaml").write_text(
        yaml.safe_dump({"config": {f"gpufleet:{k}": v for k, v in raw.items()}}, sort_keys=False))
    return root
