"""Building blocks shared by the rollout tests: a small spec, its plan, an orchestrator over fakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.gates import synth
from gpufleet.gates.settings import GateSettings
from gpufleet.plan import build_plan
from gpufleet.pool.sim import SimPool
from gpufleet.rollout.backends import LocalJournalStore
from gpufleet.rollout.journal import Journal
from gpufleet.rollout.orchestrator import Orchestrator
from gpufleet.rollout.run_config import Adapters, Options
from gpufleet.spec import ClusterSpec

from tests.rollout.fakes import FakeCloud


def small_spec(nodes: int = 12, canary: float = 0.25, batch_size: int = 4, spare_fraction: float = 0.25,
               **rollout: Any) -> ClusterSpec:
    raw = {
        "cluster": {"name": "tst", "region": "us-east-1", "availabilityZone": "us-east-1a",
                    "instanceType": "p5.48xlarge", "targetGpus": 8 * nodes, "unitGpus": 8,
                    "spareFraction": spare_fraction},
        "partitions": [{"name": "train", "mode": "data-parallel", "units": nodes}],
        "rollout": {"canaryFraction": canary, "batchSize": batch_size, **rollout},
        "pool": {"type": "sim"},
    }
    return ClusterSpec.from_raw(raw, source="test")


def settings() -> GateSettings:
    versions = {k: v for k, v in synth.DEFAULT_VERSIONS.items()}
    versions["kernel"] = "6.1"
    return GateSettings(instance_type="p5.48xlarge", expected_versions=versions, bom_digest="sha256:test")


def orchestrator(tmp: Path, cloud: FakeCloud, spec: ClusterSpec | None = None, journal: Journal | None = None,
                 **options: Any) -> Orchestrator:
    spec = spec or small_spec()
    plan = build_plan(spec)
    state_dir = tmp / "state"
    pool = SimPool(state_dir / "pool.json", cloud, failures_before_blacklist=spec.rollout.failures_before_blacklist,
                   slots=[s.name for s in plan.nodes])
    if journal is None:
        journal = Journal(LocalJournalStore(state_dir / "journal.jsonl"), "t", now=cloud.clock.now)
        journal.load()
    opts = Options(max_failure_rate=spec.rollout.max_failure_rate,
                   canary_max_failure_rate=spec.rollout.canary_max_failure_rate,
                   pipelining=spec.rollout.pipelining, **options)
    return Orchestrator(plan, "t", Adapters(cloud, cloud, pool, cloud.clock), journal, settings(), state_dir, opts)
