"""Kueue usage by the pool's queue layout: a workload admitted by team T's ClusterQueue `P-T` is T's
GPU hours on partition P (never split from the name: teams and partitions may hold dashes), whatever
team label it carries; on a partition's operators' queue `P` the label, else the namespace, names the team."""

from __future__ import annotations

from gpufleet.cost.kueue import queue_owners, to_usage
from gpufleet.plan import build_plan
from gpufleet.pool.kubernetes.queues import queue_layout
from gpufleet.spec import ClusterSpec
from tests.ops.cost_helpers import workload
from tests.pool.conftest import small_spec


def _owners():
    raw = small_spec(type="kubernetes").model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["ops"] = {"tenants": [{"name": "ml-ops", "partitions": ["train", "debug"]},
                              {"name": "vision", "partitions": ["train"]}]}
    spec = ClusterSpec.from_raw(raw, source="tests/ops/test_cost_kueue_queues.py")
    return queue_owners(queue_layout(spec, build_plan(spec), spec.cluster.instance))


def test_usage_goes_to_the_team_and_partition_of_the_queue_that_admitted_it():
    owners = _owners()
    assert owners == {"train": ("train", None), "train-ml-ops": ("train", "ml-ops"), "train-vision": ("train", "vision"),
                      "debug": ("debug", None), "debug-ml-ops": ("debug", "ml-ops")}
    mine = to_usage(workload("pretrain", ns="train-ml-ops", team="vision"), owners)  # a label cannot move the hours
    assert (mine.team, mine.partition, mine.gpus) == ("ml-ops", "train", 16)
    ops = to_usage(workload("probe", ns="debug", team="vision"), owners)
    assert (ops.team, ops.partition) == ("vision", "debug")
    unlabelled = to_usage(workload("probe", ns="debug"), owners)
    assert (unlabelled.team, unlabelled.partition) == ("debug", "debug")
    stray = to_usage(workload("x", ns="elsewhere"), owners)  # a ClusterQueue the pool does not name
    assert (stray.team, stray.partition) == ("elsewhere", "elsewhere")
    assert to_usage(workload("pretrain", ns="train-ml-ops")).partition == "train-ml-ops"  # without the layout
