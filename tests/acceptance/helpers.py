"""Shared builders for the acceptance tests: in-memory bundles, a stack's storage plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from gpufleet import catalog
from gpufleet.gates.bundle import Bundle, Manifest
from gpufleet.plan.model import StoragePlan
from gpufleet.plan.storage import plan_storage
from gpufleet.spec import StorageConfig

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
P5 = catalog.get("p5.48xlarge")


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def bundle(files: Mapping[str, str], slot: str = "acceptance") -> Bundle:
    return Bundle(path=f"/mem/{slot}", manifest=Manifest(slot=slot), files=dict(files))


def storage(**kw: object) -> tuple[StorageConfig, StoragePlan]:
    cfg = StorageConfig(**kw)
    plan, _ = plan_storage(cfg, P5, nodes=4)
    return cfg, plan


def fio_doc(jobs: list[dict]) -> str:
    """An fio JSON document in fio 3.33's shape (the fields the parser reads), one entry per job."""
    def direction(d: dict | None) -> dict:
        d = d or {}
        return {"io_bytes": d.get("io_bytes", 0), "bw_bytes": d.get("bw_bytes", 0), "iops": d.get("iops", 0.0),
                "runtime": d.get("runtime", 0),
                "clat_ns": {"min": 1, "max": 2, "mean": 1.5, "percentile": {
                    "50.000000": d.get("p50", 1000), "99.000000": d.get("p99", 2000)}}}
    return json.dumps({"fio version": "fio-3.33", "jobs": [
        {"jobname": j.get("name", "job"), "groupid": 0, "error": j.get("error", 0),
         "read": direction(j.get("read")), "write": direction(j.get("write"))} for j in jobs]})
