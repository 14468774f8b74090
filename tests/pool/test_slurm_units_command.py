"""`gpufleet pool units -s STACK`: the documented whole-unit submissions, from the plan.

The shapes it prints are checked against the plan's blocks here; tests/pool/test_slurm_units.py
runs them as real jobs on the local slurmctld, whose job_submit.lua accepts only those."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.plan import build_plan
from gpufleet.pool.slurm.job_submit import job_submit_lua, unit_shape
from gpufleet.spec import load_stack

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_text_says_slurm_refuses_other_shapes_and_a_kubernetes_stack_is_a_usage_error():
    done = _units("local-slurm")
    assert done.exit_code == 0 and "Slurm refuses any other shape" in done.output
    assert "sbatch --array=0-15 --partition=sim --nodes=2 --gpus=10 --switches=1 job.sh" in done.output
    refused = _units("prod")
    assert refused.exit_code == 2 and "has a kubernetes pool, not Slurm" in refused.output


def test_the_plugin_is_generated_from_the_plan():
    plan = build_plan(load_stack("local-slurm"))
    lua = job_submit_lua(plan, "tree")
    assert "local UNIT_GPUS = 10" in lua and "local NODES_PER_BLOCK = 5" in lua
    assert "local NODES_FOR_UNITS = { [1] = 2, [2] = 3, [3] = 4, [4] = 5 }" in lua
    assert '["train"] = true, ["sim"] = true, ["debug"] = true' in lua
    assert "local TREE = false" in job_submit_lua(plan, "block")  # topology/block places blocks itself
    assert unit_shape(plan, 6) is None and unit_shape(plan, 8).switches == 2  # type: ignore[union-attr]
