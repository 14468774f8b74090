"""The simulated cloud's provisioning and durable state: ids and IPs from the real program,
idempotent provisioning, capacity shortfall, replacement, the ledger, and the same answers after
a process restart (or a kill mid-write)."""

from __future__ import annotations

import ipaddress
import json
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

from gpufleet.errors import ConfigError, ProvisioningError
from gpufleet.gates import bundle as B
from gpufleet.plan import build_plan
from gpufleet.sim import EPOCH, SimulatedCloud
from gpufleet.sim import cloud as cloud_module
from gpufleet.sim import world as W
from gpufleet.sim.faults import place_faults
from gpufleet.spec import ClusterSpec

from .conftest import REPO, make_project, make_spec, open_cloud


def test_instances_are_the_programs_with_ips_from_the_compute_subnet(cloud_for):
    cloud = cloud_for(make_spec())
    res = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    assert set(res.instances) == {s.name for s in cloud.plan.nodes} and not res.shortfall
    subnet = ipaddress.IPv4Network(cloud.plan.network.compute.cidr)
    ips = [i.private_ip for i in res.instances.values()]
    assert len(set(ips)) == len(ips) and all(ipaddress.IPv4Address(ip) in subnet for ip in ips)
    for slot, inst in res.instances.items():
        assert (inst.instance_id, inst.private_ip) == (cloud.program[slot]["instance_id"],
                                                       cloud.program[slot]["private_ip"])
        assert (inst.batch, inst.block) == (cloud.slots[slot].batch, cloud.slots[slot].block)
    assert res.duration_s == cloud.config.durations.provision_api + cloud.config.durations.boot


def test_provisioning_is_idempotent_and_staged_by_batch(cloud_for):
    cloud = cloud_for(make_spec())
    first = cloud.provisioner.provision(1, cloud.plan.batch_nodes(1) + cloud.plan.batch_nodes(2)[:1])
    assert set(cloud.provisioner.inventory()) == set(first.instances) == {s.name for s in cloud.plan.batch_nodes(1)}
    assert list(first.shortfall.values()) == ["batch 2 is beyond the batch target 1"]
    events = len(cloud.ledger.events)
    again = cloud.provisioner.provision(1, cloud.plan.batch_nodes(1))
    assert again.instances == first.instances and again.duration_s == 0 and not again.shortfall
    assert len(cloud.ledger.events) == events  # nothing launched twice
    # batch 1's slots asked under a higher target: batch 2 comes up, batch 1 is returned as is
    cloud.provisioner.provision(2, cloud.plan.batch_nodes(1))
    assert {i.batch for i in cloud.provisioner.inventory().values()} == {1, 2}
    launched = [e["slot"] for e in cloud.ledger.launches()]
    assert len(launched) == len(set(launched)) == len(cloud.plan.batch_nodes(1)) + len(cloud.plan.batch_nodes(2))
    with pytest.raises(ProvisioningError, match="batch 9"):
        cloud.provisioner.provision(9, [])


def test_a_capacity_shortfall_hits_its_batch_then_clears(cloud_for):
    cloud = cloud_for(make_spec(capacityShortfall={"batch": 2, "count": 3, "failedAttempts": 1}))
    short = set(cloud.truth().shortfall)
    assert len(short) == 3 and all(cloud.slots[s].batch == 2 for s in short)
    res = cloud.provisioner.provision(2, cloud.plan.batch_nodes(2))
    assert set(res.shortfall) == short and "InsufficientInstanceCapacity" in res.shortfall[min(short)]
    assert short.isdisjoint(res.instances)
    again = cloud.provisioner.provision(2, cloud.plan.batch_nodes(2))
    assert not again.shortfall and short <= set(again.instances)
    assert [e["slot"] for e in cloud.ledger.events if e["event"] == "shortfall"] == sorted(short)


def test_replace_gives_the_slot_a_new_healthy_instance_unless_the_knob_says_otherwise(cloud_for):
    cloud = cloud_for(make_spec(faults={"xid-79": 2}, badReplacements={"slots": 1, "generations": 1}))
    cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    repeat, = cloud.truth().bad_replacements
    plain = next(s for s in cloud.truth().faulty if s != repeat)
    old = cloud.provisioner.inventory()[plain]
    new = cloud.provisioner.replace(cloud.slots[plain], "terminate")
    assert new.slot == plain and new.instance_id != old.instance_id and new.private_ip != old.private_ip
    assert cloud.profile(cloud.ledger.current()[plain]).fault is None
    assert cloud.ledger.instance(old.instance_id).state == "terminated"
    # the blacklist case: the first replacement repeats the fault, the second is healthy
    first = cloud.provisioner.replace(cloud.slots[repeat], "stop-and-report")
    assert cloud.profile(cloud.ledger.instance(first.instance_id)).fault == "xid-79"
    second = cloud.provisioner.replace(cloud.slots[repeat], "stop-and-report")
    assert cloud.profile(cloud.ledger.instance(second.instance_id)).fault is None
    # a resumed caller repeating a replacement it already made launches nothing
    events = len(cloud.ledger.events)
    assert cloud.provisioner.replace(cloud.slots[repeat], "terminate", instance_id=first.instance_id) == second
    assert len(cloud.ledger.events) == events
    ips = [i.private_ip for i in cloud.ledger.instances().values()]
    assert len(ips) == len(set(ips))


def test_state_survives_a_new_process_and_a_kill(project, tmp_path):
    spec = make_spec(faults={"row-remap-pending": 1})
    cloud = open_cloud(spec, project)  # captures the program once; the child reads the cache
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from gpufleet.plan import build_plan
        from gpufleet.project import load_project
        from gpufleet.sim import EPOCH, SimulatedCloud
        from gpufleet.spec import ClusterSpec
        import gpufleet.sim.cloud as c
        c.captured_instances = lambda *a: sys.exit("the program must come from the cache")
        spec = ClusterSpec.model_validate_json({spec.model_dump_json(by_alias=True)!r})
        cloud = SimulatedCloud.open(spec, build_plan(spec), load_project(Path({str(project.root)!r})), "local")
        res = cloud.provisioner.provision(2, [])
        slot = next(iter(cloud.truth().faulty))
        cloud.executor.remediate(cloud.provisioner.inventory()[slot], "reset-gpu")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    again = SimulatedCloud.open(spec, cloud.plan, project, "local")
    inv = again.provisioner.inventory()
    assert {i.batch for i in inv.values()} == {1, 2}
    slot = next(iter(again.truth().faulty))
    assert again.profile(again.ledger.current()[slot]).fault is None  # the reset was kept
    assert again.provisioner.provision(2, []).duration_s == 0  # nothing to launch again
    # same answers as a cloud that never restarted
    assert {s: (i.instance_id, i.private_ip) for s, i in inv.items()} == \
           {s: (p["instance_id"], p["private_ip"]) for s, p in again.program.items() if s in inv}


def test_a_torn_ledger_tail_is_cut_off(cloud_for):
    cloud = cloud_for(make_spec())
    cloud.provisioner.provision(1, [])
    path = cloud.ledger.path
    good = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"event": "launch", "slot": "x"')  # a kill mid-write
    reopened = W.Ledger(path)
    assert path.read_bytes() == good and len(reopened.events) == len(cloud.ledger.events)
    assert reopened.current() == cloud.ledger.current()


def test_the_program_runs_once_per_spec(cloud_for, project, monkeypatch):
    spec = make_spec()
    cloud = cloud_for(spec)
    monkeypatch.setattr(cloud_module, "captured_instances",
                        lambda *a: pytest.fail("the cached capture should have been used"))
    assert SimulatedCloud.open(spec, cloud.plan, project, "local").program == cloud.program
    cache = project.state_dir("local") / "sim" / W.PROGRAM
    doc = json.loads(cache.read_text())
    assert doc["key"] == cloud_module.program_cache_key(make_spec(seed=2, faults={"xid-48": 3}), "local")
    other = make_spec(target_gpus=400)
    assert doc["key"] != cloud_module.program_cache_key(other, "local")
    calls = []
    monkeypatch.setattr(cloud_module, "captured_instances", lambda *a: calls.append(a) or cloud.program)
    SimulatedCloud.open(other, build_plan(other), project, "local")
    assert len(calls) == 1  # another fleet: captured again


def test_same_seed_same_fleet_and_bytes_other_seed_other_fleet(tmp_path):
    spec = make_spec(faults={"xid-48": 2, "slow-nvlink": 1, "bad-nic": 1}, badLinks=1)
    outputs = []
    for name in ("a", "b"):
        cloud = open_cloud(spec, make_project(tmp_path / name))
        res = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
        cloud.executor.preflight(list(res.instances.values()), tmp_path / name / "bundles")
        files = {p.relative_to(tmp_path / name / "bundles"): p.read_bytes()
                 for p in sorted((tmp_path / name / "bundles").rglob("*")) if p.is_file()}
        outputs.append((cloud.truth(), files))
    assert outputs[0] == outputs[1]
    other = make_spec(seed=7, faults={"xid-48": 2, "slow-nvlink": 1, "bad-nic": 1}, badLinks=1)

    assert place_faults(build_plan(other), other.simulator).faults != \
           place_faults(build_plan(spec), spec.simulator).faults


def test_a_stack_without_the_simulator_key_is_refused(project):

    raw = make_spec().model_dump(mode="json", by_alias=True, exclude_none=True)
    del raw["simulator"]
    spec = ClusterSpec.from_raw(raw, source="test")
    with pytest.raises(ConfigError, match="not a simulated stack"):
        SimulatedCloud.open(spec, build_plan(spec), project, "local")
    assert not (project.state_dir("local") / "sim").exists()


def test_a_cloud_with_instances_keeps_its_seeded_faults(cloud_for, project):
    spec = make_spec(faults={"xid-79": 1})
    cloud = cloud_for(spec)
    stored = json.loads((project.state_dir("local") / "sim" / W.FAULTS).read_text())
    assert stored["faults"] == dict(cloud.faults.faults) and stored["digest"] == cloud.faults.digest()
    reseeded = make_spec(seed=9, faults={"xid-79": 1})
    SimulatedCloud.open(reseeded, cloud.plan, project, "local")  # nothing launched yet: a new world is fine
    cloud = SimulatedCloud.open(spec, cloud.plan, project, "local")
    cloud.provisioner.provision(1, [])
    with pytest.raises(ConfigError, match="changed after this stack's simulated cloud launched") as exc:
        SimulatedCloud.open(reseeded, cloud.plan, project, "local")
    assert exc.value.field == "gpufleet:simulator"


def test_bundles_carry_the_virtual_clocks_time_and_a_rerun_replaces_them(cloud_for, tmp_path):
    cloud = cloud_for(make_spec(target_gpus=80))
    inst = next(iter(cloud.provisioner.provision(1, cloud.plan.batch_nodes(1)).instances.values()))
    assert cloud.clock.now() == EPOCH
    cloud.clock.advance(3600)
    res = cloud.executor.preflight([inst], tmp_path)
    first = B.read_bundle(tmp_path / inst.slot)
    assert min(r.started for r in first.manifest.files.values()) == EPOCH + timedelta(hours=1)
    assert res.duration_s == cloud.config.durations.dcgm_level[2] + cloud.config.durations.preflight_other
    (tmp_path / inst.slot / "leftover.txt").write_text("from an earlier attempt")
    cloud.clock.set_elapsed(7200)
    cloud.executor.preflight([inst], tmp_path)
    again = B.read_bundle(tmp_path / inst.slot)
    assert set(again.files) == set(first.files)
    assert min(r.started for r in again.manifest.files.values()) == EPOCH + timedelta(hours=2)
    with pytest.raises(ValueError):
        cloud.clock.advance(-1)


def test_node_outputs_are_what_the_bundle_holds(cloud_for, tmp_path):
    """What stub tools on a rehearsal host print is byte for byte the simulated executor's bundle."""
    cloud = cloud_for(make_spec(target_gpus=80, faults={"efa-missing": 1}))
    res = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    slot = next(iter(cloud.truth().faulty))
    outputs = cloud.node_outputs(slot)
    cloud.executor.preflight([res.instances[slot]], tmp_path)
    bundle = B.read_bundle(tmp_path / slot)
    assert {k: text for k, (text, _) in outputs.items()} == dict(bundle.files)
    assert {k: rc for k, (_, rc) in outputs.items()} == {k: r.exit_code for k, r in bundle.manifest.files.items()}
    assert outputs[B.FI_INFO][1] != 0
    with pytest.raises(ProvisioningError, match="no running instance"):
        cloud.node_outputs("no-such-slot")
