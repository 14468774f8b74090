"""A real Slurm stack's smoke job with nothing staged by hand: the script where role `workloads`
installs it, run inside the pinned workload image through pyxis (the squashfs file role
image_prepull wrote), or with the node's interpreter without an image; and the WARNING a stack
gets when it would run the node's python3, which has no torch."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpufleet.findings import Level
from gpufleet.gates import acceptance as A
from gpufleet.gates.image import ENROOT_DIR, enroot_squashfs
from gpufleet.plan import build_plan
from gpufleet.rollout.acceptance import stack_hooks
from gpufleet.rollout.smoke_stage import smoke_paths
from gpufleet.spec import ClusterSpec
from tests.acceptance.test_real_stack_hooks import SPEC, real_wiring

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
IMAGE = f"public.ecr.aws/hpc-cloud/pytorch@{DIGEST}"
SQSH = f"/var/lib/gpufleet/enroot/{DIGEST}.sqsh"


def _defaults(role: str) -> dict:
    return yaml.safe_load((ROOT / "playbooks/roles" / role / "defaults/main.yml").read_text())


def test_the_paths_are_where_the_roles_put_them():
    assert _defaults("workloads")["workloads_dir"] == A.WORKLOADS_DIR
    assert _defaults("image_prepull")["image_prepull_enroot_dir"] == ENROOT_DIR
    assert enroot_squashfs(IMAGE) == SQSH


def test_without_an_image_the_tasks_run_the_node_interpreter():
    spec = A.smoke_launch_spec(["a", "b"], 8, "/venv/bin/python", "/opt/gpufleet/workloads/train_smoke.py",
                               "/fsx/smoke", 30, env={"MASTER_PORT": "29501"})
    assert spec.argv == ("env", "MASTER_PORT=29501", "srun", "--job-name=gpufleet-smoke", "--nodelist=a,b",
                         "--nodes=2", "--ntasks-per-node=8", "--cpu-bind=none", "-l", "--export=ALL",
                         "/venv/bin/python", "/opt/gpufleet/workloads/train_smoke.py", "--data-dir=/fsx/smoke",
                         "--steps=30")
    assert not any(a.startswith("--container") for a in spec.argv)


def test_with_an_image_the_tasks_run_its_python_through_pyxis():
    box = A.SmokeContainer(image=SQSH, mounts=("/fsx",), read_only=("/opt/gpufleet/workloads",))
    spec = A.smoke_launch_spec(["a", "b"], 8, "/venv/bin/python", "/opt/gpufleet/workloads/train_smoke.py",
                               "/fsx/smoke", 30, env={"MASTER_PORT": "29501"}, container=box)
    # the env still reaches every task: srun's environment, exported whole, which pyxis keeps
    assert spec.argv[:3] == ("env", "MASTER_PORT=29501", "srun") and spec.env == {"MASTER_PORT": "29501"}
    at = spec.argv.index("--export=ALL")
    assert spec.argv[at:] == (
        "--export=ALL", f"--container-image={SQSH}",
        "--container-mounts=/opt/gpufleet/workloads:/opt/gpufleet/workloads:ro,/fsx:/fsx",
        "--no-container-mount-home", "--no-container-entrypoint",
        "python", "/opt/gpufleet/workloads/train_smoke.py", "--data-dir=/fsx/smoke", "--steps=30")
    assert "/venv/bin/python" not in spec.argv and spec.ranks == 16


def _with(**acceptance) -> ClusterSpec:
    return SPEC.model_copy(update={"acceptance": SPEC.acceptance.model_copy(update=acceptance)})


def _launched(spec: ClusterSpec, tmp_path: Path) -> tuple[str, ...]:
    wiring = real_wiring("slurm")
    smoke = stack_hooks(spec, build_plan(spec), tmp_path, wiring=wiring).runner.collector.by_stage["smoke"]
    smoke.collect("smoke", ["n1", "n2"], [], tmp_path / "bundle")
    launched, = wiring.adapters.pool.launched.specs
    return launched.argv


def test_a_real_slurm_stack_with_a_workload_image_runs_the_job_in_it(tmp_path):
    argv = _launched(_with(workload_image=IMAGE, smoke_image_python="/usr/bin/python3.12"), tmp_path)
    assert f"--container-image={SQSH}" in argv
    assert "--container-mounts=/opt/gpufleet/workloads:/opt/gpufleet/workloads:ro,/fsx:/fsx" in argv
    script = argv.index("/opt/gpufleet/workloads/train_smoke.py")
    assert argv[script - 1] == "/usr/bin/python3.12" and "python3" not in argv


def test_a_script_on_the_shared_file_system_is_not_bound_twice(tmp_path):
    spec = _with(workload_image=IMAGE, smoke_script="/fsx/jobs/train_smoke.py")
    assert smoke_paths(spec) == ("/fsx/jobs/train_smoke.py", "/fsx/gpufleet-acceptance/smoke")
    assert "--container-mounts=/fsx:/fsx" in _launched(spec, tmp_path)


def test_a_real_stack_without_image_nor_interpreter_is_warned():
    raw = {"cluster": {"name": "tst", "region": "us-east-1", "availabilityZone": "us-east-1a",
                       "instanceType": "p5.48xlarge", "targetGpus": 16, "unitGpus": 8},
           "partitions": [{"name": "train", "mode": "data-parallel", "units": 2}],
           "pool": {"type": "slurm"}}

    def smoke_findings(acceptance: dict) -> list:
        spec = ClusterSpec.from_raw({**raw, "acceptance": acceptance}, source="test")
        return [f for f in build_plan(spec).findings if f.code == "SMOKE_NO_TORCH"]

    finding, = smoke_findings({})
    assert finding.level is Level.WARNING and finding.field == "gpufleet:acceptance.workloadImage"
    assert "acceptance.workloadImage" in finding.message and "acceptance.smokePython" in finding.message
    assert smoke_findings({"workloadImage": IMAGE}) == []
    assert smoke_findings({"smokePython": "python3"}) == []  # said explicitly: the operator installed torch
    k8s = ClusterSpec.from_raw({**raw, "pool": {"type": "kubernetes"}}, source="test")
    assert not [f for f in build_plan(k8s).findings if f.code == "SMOKE_NO_TORCH"]
