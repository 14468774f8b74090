"""What the smoke stage's collectors share (the launcher's, gpufleet.rollout.acceptance, and the
Kubernetes Job's, gpufleet.rollout.kubernetes_smoke): where a real stack's script and dataset
live, and the stage's bundle from one launch."""

from __future__ import annotations

from pathlib import Path

from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import FileRecord, Manifest, write_bundle
from gpufleet.pool.protocol import LaunchResult
from gpufleet.rollout.state import ACCEPTANCE_STAGES
from gpufleet.spec import ClusterSpec

SMOKE = ACCEPTANCE_STAGES[2]  # the last acceptance stage: the training smoke job


def smoke_paths(spec: ClusterSpec) -> tuple[str, str]:
    """(train_smoke.py, its dataset folder) as a real stack's nodes see them: `acceptance.smokeScript`,
    else where site.yml's workloads role installs it on every node; the dataset on the shared file
    system's gpufleet-acceptance folder (every rank reads what rank 0 wrote; the base checks write there too)."""
    base = f"{spec.storage.mount_path.rstrip('/')}/gpufleet-acceptance"
    return spec.acceptance.smoke_script or f"{A.WORKLOADS_DIR}/{Path(A.SMOKE_SCRIPT).name}", f"{base}/smoke"


def smoke_bundle(out: Path, result: LaunchResult, collected_by: str) -> Path:
    """The smoke stage's bundle from one launch: its raw output, command, exit code and times."""
    record = FileRecord(command=result.command, exit_code=result.exit_code, started=result.started,
                        ended=result.ended)
    return write_bundle(out, {A.TRAIN_SMOKE: result.output},
                        Manifest(slot="acceptance-smoke", collected_by=collected_by, files={A.TRAIN_SMOKE: record}))
