"""`gpufleet pool units -s STACK`: the documented whole-unit submissions, from the plan.

The shapes it prints are checked against the plan's blocks here; tests/pool/test_slurm_units.py
runs them as real jobs on the local slurmctld, whose job_submit.lua accepts only those."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.plan import build_plan
from gpufleet.pool.kubernetes.queues import queue_layout
from gpufleet.pool.kubernetes.unit_jobs import documented_jobs
from gpufleet.pool.slurm.job_submit import job_submit_lua, unit_shape
from gpufleet.spec import load_stack, load_stack_path

ROOT = Path(__file__).resolve().parents[2]
# an ECR reference pinned by digest, the form gpufleet:acceptance.workloadImage takes
IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/train@sha256:" + "a" * 64


def _units(stack: str, *extra: str):
    return CliRunner().invoke(main, ["--project", str(ROOT), "pool", "units", "-s", stack, *extra])


def _option(args: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))


def test_the_three_modes_on_local_slurm_are_whole_units_inside_blocks():
    done = _units("local-slurm", "--json")
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    plan = build_plan(load_stack("local-slurm"))
    t = plan.topology
    ways = {w["mode"]: w for w in doc["ways"]}
    assert set(ways) == {"all-units", "independent", "prefill-decode"}
    # train's 80 units are 20 whole blocks of 4: every GPU of 100 nodes
    everything = ways["all-units"]["sbatch"]
    assert everything == ["--partition=train", "--nodes=100", f"--gpus-per-node={t.gpus_per_node}", "--exclusive"]
    assert ways["independent"]["sbatch"][:2] == ["--array=0-15", "--partition=sim"]
    for way in doc["ways"]:
        for component in " ".join(way["sbatch"]).split(" : "):
            args = component.split()
            nodes = int(_option(args, "nodes"))
            gpus = (int(_option(args, "gpus")) if any(a.startswith("--gpus=") for a in args)
                    else nodes * int(_option(args, "gpus-per-node")))
            shape = unit_shape(plan, gpus // t.unit_gpus)
            assert gpus % t.unit_gpus == 0 and shape is not None and shape.nodes == nodes, (way["mode"], args)


def test_the_text_says_slurm_refuses_other_shapes():
    done = _units("local-slurm")
    assert done.exit_code == 0 and "Slurm refuses any other shape" in done.output
    assert "sbatch --array=0-15 --partition=sim --nodes=2 --gpus=10 --switches=1 job.sh" in done.output


def test_a_kubernetes_stack_without_a_workload_image_is_refused_naming_that_field():
    # Issue 20 asks for the documented submissions on Kubernetes too: the usage error ("not Slurm")
    # is gone; what remains is the image the jobs run, which prod as shipped does not name.
    refused = _units("prod")
    assert refused.exit_code == 2, refused.output
    assert "gpufleet:acceptance.workloadImage" in refused.output and "not Slurm" not in refused.output


def test_a_kubernetes_stack_prints_the_unit_jobs_kueue_admits(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(ROOT / "stacks", root / "stacks")
    shutil.copytree(ROOT / "images", root / "images")
    stack_file = root / "stacks" / "Pulumi.prod.yaml"
    doc = yaml.safe_load(stack_file.read_text())
    doc["config"]["gpufleet:acceptance"] = {"workloadImage": IMAGE}
    stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = CliRunner().invoke(main, ["--project", str(root), "pool", "units", "-s", "prod"])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("# prod: unit jobs for its Kueue queues")
    jobs = list(yaml.safe_load_all(done.output))
    spec = load_stack_path(stack_file)
    plan = build_plan(spec)
    layout = queue_layout(spec, plan, spec.cluster.instance)
    assert jobs == documented_jobs(layout, {p.name: p.mode for p in plan.partitions}, plan.topology, IMAGE,
                                   ["hostname"], spec.storage.mount_path)
    # one job per seed mode at least, each in a queue namespace naming its LocalQueue and priority class
    assert jobs and all(j["kind"] == "Job" for j in jobs)
    queues = {x.namespace: x for x in layout}
    for job in jobs:
        labels = job["metadata"]["labels"]
        ns = job["metadata"]["namespace"]
        assert ns in queues and labels["kueue.x-k8s.io/queue-name"] == ns
        assert labels["kueue.x-k8s.io/priority-class"].startswith("gpufleet-")
        assert job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE


def test_the_plugin_is_generated_from_the_plan():
    plan = build_plan(load_stack("local-slurm"))
    lua = job_submit_lua(plan, "tree")
    assert "local UNIT_GPUS = 10" in lua and "local NODES_PER_BLOCK = 5" in lua
    assert "local NODES_FOR_UNITS = { [1] = 2, [2] = 3, [3] = 4, [4] = 5 }" in lua
    assert '["train"] = true, ["sim"] = true, ["debug"] = true' in lua
    assert "local TREE = false" in job_submit_lua(plan, "block")  # topology/block places blocks itself
    assert unit_shape(plan, 6) is None and unit_shape(plan, 8).switches == 2  # type: ignore[union-attr]


def test_with_tenants_the_text_says_which_account_submits_where_and_who_preempts_whom():
    from gpufleet.pool.slurm.units import render, submit_ways, team_lines
    from gpufleet.spec import ClusterSpec

    raw = load_stack("local-slurm").model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["pool"]["preemption"] = "requeue"
    raw["ops"] = {**raw.get("ops", {}), "slurmAccounting": True, "tenants": [
        {"name": "bulk", "partitions": ["train", "sim"]}, {"name": "urgent", "partitions": ["sim"], "priority": 10}]}
    spec = ClusterSpec.from_raw(raw, source="tests/pool/test_slurm_units_command.py")
    text = render(submit_ways(spec, build_plan(spec), "tree"), "local-slurm", team_lines(spec))
    assert "    train: -A bulk\n" in text and "    sim: -A bulk, -A urgent\n" in text
    assert "preemption (requeue)" in text and text.endswith("    sim: urgent (10) > bulk (0)")
    assert team_lines(load_stack("local-slurm")) == []  # no tenants: nothing about accounts
