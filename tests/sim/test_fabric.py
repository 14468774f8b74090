"""The fabric model through the launcher: a slow link slows only the groups whose ring crosses it,
a bad NIC every group with its node, sockets show in NCCL's lines; and the REAL isolation
algorithm, fed the launcher's real-format output through the real parser, finds them."""

from __future__ import annotations

import pytest

from gpufleet.gates.baseline import large_message_busbw
from gpufleet.gates.isolation import isolate
from gpufleet.gates.launch import launch_spec, round_specs
from gpufleet.gates.parsers import nccl_debug, nccl_tests

from .conftest import make_spec

GIB = 2**30


@pytest.fixture
def fabric(cloud_for):
    cloud = cloud_for(make_spec(faults={"bad-nic": 1, "efa-missing": 1}, badLinks=1))
    cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    return cloud


def busbw(cloud, *groups, kind="slurm"):
    specs = round_specs([tuple(g) for g in groups], kind, cloud.sku, cloud.versions, message_bytes=4 * GIB)
    out = []
    for r in cloud.launcher.run(specs, timeout_s=600):
        assert r.exit_code == 0, r.output[-400:]
        out.append(large_message_busbw(nccl_tests.parse_text(r.output), GIB))
    return out


def healthy(cloud, n, avoid=()):
    t = cloud.truth()
    bad = set(t.faulty) | {s for link in t.bad_links for s in link} | set(avoid)
    return [s.name for s in cloud.plan.nodes if s.name not in bad][:n]


def test_a_slow_link_slows_only_the_groups_that_cross_it(fabric):
    (a, b), = fabric.truth().bad_links
    c, d, e = healthy(fabric, 3)
    floor = fabric.sku.multi_node_busbw_floor_gbs
    pair_ab, pair_ac, pair_bd, pair_ce = busbw(fabric, (a, b), (a, c), (b, d), (c, e))
    assert pair_ab < floor <= min(pair_ac, pair_bd, pair_ce)
    across, apart = busbw(fabric, (a, b, c), (a, c, b, d))  # ring a-b-c-a crosses it; a-c-b-d-a does not
    assert across < floor <= apart


def test_a_bad_nic_slows_every_group_with_its_node(fabric):
    nic = next(s for s, t in fabric.truth().faulty.items() if t.fault == "bad-nic")
    others = healthy(fabric, 6)
    floor = fabric.sku.multi_node_busbw_floor_gbs
    with_nic = busbw(fabric, (nic, others[0]), (others[1], others[2]))
    ring = busbw(fabric, (nic, *others[3:6]))
    assert with_nic[0] < floor <= with_nic[1] and ring[0] < floor


def test_a_socket_fallback_node_shows_it_in_ncclS_lines_and_crawls(fabric):
    node = next(s for s, t in fabric.truth().faulty.items() if t.fault == "efa-missing")
    other = healthy(fabric, 1)[0]
    spec = launch_spec("ssh", (node, other), fabric.sku, fabric.versions)
    r = fabric.launcher.run([spec], timeout_s=600)[0]
    host = fabric.ledger.current()[node].private_ip.replace(".", "-")
    mine = "\n".join(line for line in r.output.splitlines() if f"ip-{host}:" in line)
    assert nccl_debug.parse_net(mine).socket_fallback and not nccl_debug.parse_net(mine).efa_used
    assert large_message_busbw(nccl_tests.parse_text(r.output), GIB) < 0.1 * fabric.sku.multi_node_busbw_floor_gbs


def test_the_real_isolation_names_the_bad_link_and_the_bad_nic(fabric):
    """Batch by batch, as the rollout runs it: the nodes that passed preflight, earlier batches admitted."""
    truth = fabric.truth()
    nic = next(s for s, t in truth.faulty.items() if t.fault == "bad-nic")
    floor = fabric.sku.multi_node_busbw_floor_gbs

    def run_round(groups):
        return [b or 0.0 for b in busbw(fabric, *groups)]

    admitted: list[str] = []
    links, quarantined = [], {}
    for b in fabric.plan.batches:
        batch = [s.name for s in fabric.plan.batch_nodes(b.number) if s.name not in truth.faulty or s.name == nic]
        result = isolate(batch, admitted, run_round, floor)
        links += result.link_faults
        quarantined.update(result.quarantined)
        assert not result.unresolved and not result.ring_faults
        admitted += result.good
    assert links == list(truth.bad_links)
    assert quarantined == {nic: "efa-pair-fail"}


def test_failed_launches_and_timeouts_are_reported_not_hidden(cloud_for):
    cloud = cloud_for(make_spec(target_gpus=80, faults={"unreachable": 1}))
    cloud.provisioner.provision(1, cloud.plan.batch_nodes(1))
    down = next(iter(cloud.truth().faulty))
    up = [s.name for s in cloud.plan.nodes if s.name != down and s.batch == 1]
    not_launched = next(s.name for s in cloud.plan.nodes if s.batch > 1)
    specs = round_specs([(down, up[0]), (up[1], not_launched), (up[2], up[3])], "slurm", cloud.sku, cloud.versions)
    r_down, r_missing, r_ok = cloud.launcher.run(specs, timeout_s=600)
    assert r_down.exit_code != 0 and "srun: error" in r_down.output and not nccl_tests.parse_text(r_down.output).rows
    assert r_missing.exit_code != 0 and not_launched in r_missing.output
    assert r_ok.exit_code == 0
    timed_out = cloud.launcher.run(specs[2:], timeout_s=1)[0]
    assert timed_out.exit_code == 124 and not nccl_tests.parse_text(timed_out.output).rows
    assert (timed_out.ended - timed_out.started).total_seconds() == 1


def test_the_same_run_gives_the_same_output(fabric):
    groups = [tuple(healthy(fabric, 4)[:2]), tuple(healthy(fabric, 4)[2:])]
    specs = round_specs(groups, "kubernetes", fabric.sku, fabric.versions)
    first = [r.output for r in fabric.launcher.run(specs, 600)]
    assert first == [r.output for r in fabric.launcher.run(specs, 600)]
    assert all(nccl_tests.parse_text(o).rows for o in first)
