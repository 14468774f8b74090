"""Planner rules with the seed design's numbers as cases."""

from __future__ import annotations

import pytest

from gpufleet import catalog
from gpufleet.findings import Level
from gpufleet.plan import build_plan, plan_stack
from gpufleet.plan.batches import plan_batches
from gpufleet.plan.memory import memory_fit
from gpufleet.plan.network import pod_ips_per_node, smallest_prefix, subnet_budget
from gpufleet.plan.partitions import allocate
from gpufleet.plan.storage import capacity_gib, plan_storage
from gpufleet.plan.topology import build_topology, layout, max_blast_radius, slot_name
from gpufleet.spec import ClusterSpec, ModelConfig, Partition, PodNetworking, StorageConfig, load_stack


def spec_with(**overrides) -> ClusterSpec:
    raw = {
        "cluster": {"name": "test", "region": "us-east-1", "availabilityZone": "us-east-1a",
                    "instanceType": "p5.48xlarge", "targetGpus": 1000, "unitGpus": 10, "spareFraction": 0.04},
        "pool": {"type": "sim"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return ClusterSpec.from_raw(raw, source="test")


def codes(findings, level=None):
    return {f.code for f in findings if level is None or f.level is level}


# --- topology -------------------------------------------------------------------------------

def shaped(cluster, gpus, unit, per_node, spares):
    topo, findings = build_topology(cluster, gpus, unit, per_node, spares)
    slots, units, blocks = layout(cluster, topo, {b: 1 for b in range(topo.blocks)}, {})
    return topo, slots, units, blocks, findings


def test_seed_1000_gpus_in_10_gpu_units():
    topo, slots, units, blocks, findings = shaped("c", 1000, 10, 8, 0.0)
    assert (topo.nodes, topo.blocks, topo.units) == (125, 25, 100)
    assert (topo.nodes_per_block, topo.units_per_block, topo.block_gpus) == (5, 4, 40)
    assert topo.max_blast_radius == 2
    assert [len(s.units) for s in slots[:5]] == [1, 2, 2, 2, 1]
    assert units[1].nodes == (1, 2)
    assert "UNITS_SHARE_NODES" in codes(findings, Level.WARNING)
    alts = {a.unit_gpus: a for a in topo.alternatives}
    assert set(alts) == {8, 16}
    assert alts[8].units == 125 and alts[8].max_blast_radius == 1
    assert alts[16].units == 62 and alts[16].nodes_per_block == 2 and alts[16].max_blast_radius == 1


@pytest.mark.parametrize("unit,blast,warn", [(8, 1, False), (16, 1, False), (4, 2, True), (10, 2, True), (12, 2, True)])
def test_blast_radius_and_sharing_warning(unit, blast, warn):
    topo, *_, findings = shaped("c", 960, unit, 8, 0.0)
    assert max_blast_radius(unit, 8) == blast == topo.max_blast_radius
    assert ("UNITS_SHARE_NODES" in codes(findings)) is warn


def test_spares_and_slot_names_are_stable_as_the_cluster_grows():
    small = shaped("prod", 1000, 10, 8, 0.04)
    big = shaped("prod", 2000, 10, 8, 0.04)
    assert small[0].spare_nodes == 5
    assert [s.name for s in small[1]] == [s.name for s in big[1][:125]]
    assert slot_name("prod", 3, 17) == "prod-b0003-n00017"


def test_unit_larger_than_cluster_is_an_error():
    *_, findings = shaped("c", 16, 64, 8, 0.0)
    assert "UNIT_LARGER_THAN_CLUSTER" in codes(findings, Level.ERROR)


def test_partial_last_block_and_idle_gpus():
    topo, slots, units, blocks, findings = shaped("c", 1004, 10, 8, 0.0)
    assert topo.nodes == 126 and topo.units == 100 and topo.idle_gpus == 8
    assert blocks[-1].nodes == (125,) and blocks[-1].units == ()
    assert {"GPUS_ROUNDED_UP", "IDLE_GPUS"} <= codes(findings, Level.INFO)


# --- partitions ------------------------------------------------------------------------------

def P(name, mode, **kw):
    return Partition.model_validate({"name": name, "mode": mode, **kw})


def test_seed_all_units_in_one_data_parallel_job():
    allocs, findings = allocate([P("train", "data-parallel", units=100)], 100, 25, 4, 10)
    assert allocs[0].units == 100 and allocs[0].blocks == tuple(range(25))
    assert not codes(findings, Level.ERROR)


def test_seed_100_independent_units():
    allocs, _ = allocate([P("exp", "independent", units=100)], 100, 25, 4, 10)
    assert allocs[0].units == 100 and allocs[0].gpus == 1000


def test_seed_inference_split_prefill_300_decode_700_gpus():
    allocs, findings = allocate([P("prefill", "inference-prefill", gpus=300), P("decode", "inference-decode", gpus=700)],
                                100, 25, 4, 10)
    assert [a.requested_units for a in allocs] == [30, 70]
    assert sum(len(a.blocks) for a in allocs) == 25
    assert not set(allocs[0].blocks) & set(allocs[1].blocks)
    assert {a.units for a in allocs} == {32, 68}
    assert "PARTITION_ROUNDED_TO_BLOCKS" in codes(findings, Level.WARNING)
    assert not codes(findings, Level.ERROR)


def test_seed_three_queues_with_small_debug_partition():
    plan = build_plan(load_stack("local"))
    by_name = {p.name: p for p in plan.partitions}
    assert (by_name["train"].units, by_name["sim"].units, by_name["debug"].units) == (80, 16, 4)
    assert len(by_name["debug"].blocks) == 1
    assert all(u.partition for u in plan.units)


def test_shares_exceeding_cluster_and_quota_findings():
    _, findings = allocate([P("a", "independent", units=90), P("b", "independent", units=20)], 100, 25, 4, 10)
    assert "PARTITIONS_EXCEED_CLUSTER" in codes(findings, Level.ERROR)
    _, findings = allocate([P("a", "independent", units=8, quotaUnits=12)], 100, 25, 4, 10)
    assert "QUOTA_EXCEEDS_SHARE" in codes(findings, Level.WARNING)


def test_partition_gpus_not_whole_units_warns():
    allocs, findings = allocate([P("a", "independent", gpus=45)], 100, 25, 4, 10)
    assert allocs[0].requested_units == 5
    assert "PARTITION_GPUS_NOT_UNITS" in codes(findings)


# --- batches ---------------------------------------------------------------------------------

def test_canary_then_block_aligned_batches():
    batches, _ = plan_batches(125, 5, 0.1, 25)
    assert batches[0].canary and batches[0].node_count == 15
    assert [b.node_count for b in batches] == [15, 25, 25, 25, 25, 10]
    assert all(b.first_node % 5 == 0 for b in batches)


def test_canary_is_at_least_one_block():
    batches, _ = plan_batches(125, 5, 0.001, 25)
    assert batches[0].node_count == 5


def test_batch_smaller_than_block_warns():
    batches, findings = plan_batches(125, 5, 0.1, 3)
    assert "BATCH_SMALLER_THAN_BLOCK" in codes(findings)
    assert all(b.node_count == 5 for b in batches[1:-1])


# --- network ---------------------------------------------------------------------------------

def test_p5_layout_takes_one_ip_per_node():
    p5 = catalog.get("p5.48xlarge")
    assert p5.ips_per_node == 1 and p5.efa_interfaces == 32
    assert catalog.get("p4d.24xlarge").efa_interfaces == 4


def test_vpc_cni_pod_ips():
    # 110 pods on 49 secondaries per ENI: 3 ENIs + 1 warm ENI = 196 secondaries + 3 extra ENI primaries
    assert pod_ips_per_node(PodNetworking(mode="vpc-cni", max_pods=110), 50, "kubernetes") == 199
    assert pod_ips_per_node(PodNetworking(mode="vpc-cni", max_pods=110, warm_ip_target=8), 50, "kubernetes") == 118 + 2
    assert pod_ips_per_node(PodNetworking(mode="vpc-cni"), 50, "slurm") == 0


def test_subnet_budget_names_the_smallest_prefix():
    b = subnet_budget("compute", "10.0.0.0/26", 130, 0.2)
    assert not b.fits and b.needed == 161 and b.smallest_prefix == 24
    assert smallest_prefix(256) == 24 and smallest_prefix(257) == 23


def test_prod_plan_counts_pod_ips():
    plan = build_plan(load_stack("prod"))
    assert plan.network.pod_ips_per_node == 120
    assert plan.network.nodes_counted == 130
    assert plan.network.compute.fits


# --- storage ---------------------------------------------------------------------------------

@pytest.mark.parametrize("needed,expected", [(100, 1200), (1200, 1200), (1201, 2400), (2401, 4800), (4800, 4800),
                                             (4801, 7200)])
def test_ssd_capacity_increments(needed, expected):
    assert capacity_gib(needed, StorageConfig())[0] == expected


@pytest.mark.parametrize("tier,step", [(125, 38400), (250, 19200), (500, 9600), (1000, 4800)])
def test_efa_capacity_increments(tier, step):
    storage = StorageConfig(efa_enabled=True, throughput_per_tib=tier)
    assert capacity_gib(1, storage) == (step, step)
    assert capacity_gib(step + 1, storage)[0] == 2 * step


def test_storage_capacity_formula_and_checkpoint_time():
    storage = StorageConfig(dataset_tib=50, checkpoint_tib=2, checkpoints_retained=5, throughput_per_tib=250,
                            target_checkpoint_write_seconds=300)
    plan, findings = plan_storage(storage, catalog.get("p5.48xlarge"), 125)
    assert plan.needed_tib == pytest.approx(72.0)  # (50 + 2 x 5) x 1.2
    assert plan.capacity_gib == 74400
    assert plan.aggregate_throughput_mbs == int(74400 / 1024 * 250)
    assert plan.checkpoint_write_seconds == pytest.approx(2 * 2**40 / 1e6 / plan.aggregate_throughput_mbs, rel=1e-3)
    assert not findings


def test_slow_checkpoint_names_a_tier_that_would_meet_it():
    storage = StorageConfig(dataset_tib=1, checkpoint_tib=1, checkpoints_retained=1, throughput_per_tib=125,
                            target_checkpoint_write_seconds=600)
    _, findings = plan_storage(storage, catalog.get("p5.48xlarge"), 2)
    (slow,) = [f for f in findings if f.code == "CHECKPOINT_WRITE_SLOW"]
    assert "throughputPerTib" in slow.message or "no throughput tier" in slow.message


def test_client_bandwidth_can_be_the_bottleneck():
    storage = StorageConfig(dataset_tib=500, checkpoint_tib=1, throughput_per_tib=1000)
    plan, _ = plan_storage(storage, catalog.get("p5.48xlarge"), 1)
    assert plan.effective_throughput_mbs == plan.client_throughput_mbs == 12500


def test_intelligent_tiering_throughput_steps():
    storage = StorageConfig(storage_class="INTELLIGENT_TIERING", checkpoint_tib=2, target_checkpoint_write_seconds=300)
    plan, _ = plan_storage(storage, catalog.get("p5.48xlarge"), 125)
    assert plan.capacity_gib is None and plan.aggregate_throughput_mbs % 4000 == 0
    assert plan.checkpoint_write_seconds <= 300


# --- memory fit ------------------------------------------------------------------------------

def test_memory_fit_mixed_precision_adam_is_16_bytes_per_parameter():
    fit, findings = memory_fit(ModelConfig(parameters_billions=30), catalog.get("p5.48xlarge"), 10)
    assert fit.bytes_per_parameter == 16
    assert fit.usable_gib == 720 and fit.fits
    fit, findings = memory_fit(ModelConfig(parameters_billions=70), catalog.get("p5.48xlarge"), 10)
    assert not fit.fits and "MODEL_DOES_NOT_FIT_UNIT" in codes(findings, Level.ERROR)


def test_h200_units_hold_more():
    fit, _ = memory_fit(ModelConfig(parameters_billions=70), catalog.get("p5e.48xlarge"), 10)
    assert fit.unit_hbm_gib == 1410 and fit.fits


# --- whole plan ------------------------------------------------------------------------------

def test_every_shipped_stack_validates_without_error():
    from gpufleet.spec import available_stacks

    stacks = available_stacks()
    assert {"local", "dev", "prod", "inference"} <= set(stacks)
    for name in stacks:
        plan = plan_stack(load_stack(name))
        assert not codes(plan.findings, Level.ERROR), (name, [f.render() for f in plan.findings])


def test_plan_json_round_trips_with_schema_version():
    from gpufleet.plan.model import ClusterPlan

    plan = build_plan(load_stack("local"))
    again = ClusterPlan.model_validate_json(plan.model_dump_json())
    assert again == plan and again.schema_version == 2


def test_rollout_target_past_last_batch_is_reported():
    plan = build_plan(spec_with(rollout={"targetBatch": 99}))
    assert "TARGET_PAST_LAST_BATCH" in codes(plan.findings)
