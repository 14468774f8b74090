"""Parallel gating gives the records the serial path gives, error for error."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone

from click.testing import CliRunner

from gpufleet.bom import load_bom
from gpufleet.cli import main
from gpufleet.gates import bundle as B, synth, versions
from gpufleet.gates.evaluate import PARALLEL_MIN_NODES, gate_cohort, gate_folders
from gpufleet.gates.settings import GateSettings

from .conftest import REPO

WHEN = datetime(2026, 7, 14, 9, 0, tzinfo=timezone.utc)
SETTINGS = GateSettings(expected_by_os=versions.expectations_by_os(load_bom(REPO / "images" / "bom.yaml")),
                        bom_digest="sha256:test")


def _cohort(root, n=PARALLEL_MIN_NODES + 16, seed=3):
    rng = random.Random(seed)
    faults = sorted(synth.FAULTS)
    for i in range(n):
        spec = synth.NodeSpec(slot=f"n{i:03d}", faults=frozenset({rng.choice(faults)}) if rng.random() < 0.2 else
                              frozenset(), xids=(79,) if i == 5 else (), xid_gpu=i % 8,
                              intra_busbw=300.0 if i == 7 else rng.gauss(480, 4))  # n007: a cohort outlier
        synth.write_node(root / spec.slot, spec)
    (root / "n011" / B.MANIFEST).write_text("[]")  # a bad manifest, gated on its files
    return B.find_bundles(root)


def test_parallel_and_serial_records_are_identical(tmp_path):
    folders = _cohort(tmp_path)
    serial = gate_folders(folders, SETTINGS, decided_at=WHEN, workers=1)
    parallel = gate_folders(folders, SETTINGS, decided_at=WHEN, workers=2)
    assert [r.model_dump() for r in parallel] == [r.model_dump() for r in serial]
    in_memory = gate_cohort([B.read_bundle(f) for f in folders], SETTINGS, decided_at=WHEN, workers=2)
    assert [r.model_dump() for r in in_memory] == [r.model_dump() for r in serial]
    by_slot = {r.slot: r for r in serial}
    checks = {slot: {c.check_id: c for c in r.checks} for slot, r in by_slot.items()}
    assert by_slot["n005"].reason_codes[0] == "xid-79"
    assert checks["n011"]["bundle.manifest"].reason_code == "bad-manifest"
    assert checks["n007"]["nccl.intra.cohort"].verdict.value == "REMEDIATE"  # the cohort step saw every node
    assert len({r.busbw.cohort_median_gbs for r in serial}) == 1  # one cohort median, computed once


def test_a_worker_error_reaches_the_cli_as_exit_2(tmp_path):
    folders = _cohort(tmp_path)
    manifest = json.loads((folders[3] / B.MANIFEST).read_text())
    manifest["instance_type"] = "p9.huge"
    (folders[3] / B.MANIFEST).write_text(json.dumps(manifest))
    for workers in ("1", "2"):
        r = CliRunner().invoke(main, ["gate", str(tmp_path), "--workers", workers])
        assert r.exit_code == 2 and "p9.huge" in r.output and "n003" in r.output, (workers, r.output)
