"""Every seeded fault is caught by the REAL gates with the reason codes the fault table expects;
healthy nodes pass; remediation changes what the retest sees exactly as the research buckets say."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.gates.bundle import find_bundles, read_bundle
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.versions import expectations
from gpufleet.gates.verdict import Action
from gpufleet.ports import HostStatus
from gpufleet.sim import EFFECTS

from .conftest import GATED_KINDS, QUIRK_KINDS, make_spec


def gate(cloud, instances, dest: Path, previous=None):
    res = cloud.executor.preflight(instances, dest)
    bundles = [read_bundle(f) for f in find_bundles(dest)]
    settings = GateSettings(instance_type=cloud.sku.name, dcgm_level=cloud.spec.gates.dcgm_level,
                            expected_versions=expectations(cloud.bom, cloud.spec.image.os, cloud.spec.pool.type),
                            pool=cloud.spec.pool.type, workload_image=cloud.spec.acceptance.workload_image)
    return res, {r.slot: r for r in gate_cohort(bundles, settings, previous=previous)}


@pytest.fixture
def every_fault(cloud_for):
    return cloud_for(make_spec(faults={k: 1 for k in GATED_KINDS}, badLinks=1))


def test_every_preflight_fault_is_caught_with_its_reason_codes(every_fault, tmp_path):
    cloud = every_fault
    plan = cloud.plan
    prov = cloud.provisioner.provision(len(plan.batches), plan.nodes)
    assert not prov.shortfall
    res, records = gate(cloud, list(prov.instances.values()), tmp_path / "b")
    truth = cloud.truth()
    assert {t.fault for t in truth.faulty.values()} == set(GATED_KINDS)
    for slot, rec in records.items():
        t = truth.faulty.get(slot)
        if t is None or t.effect.stage != "preflight":
            assert rec.action is Action.ADMIT, (slot, rec.reason_codes, t)
            continue
        expected = t.effect.reason_codes
        assert rec.reason_codes[:1] == expected[:1] and set(expected) <= set(rec.reason_codes), (t.fault, rec)
        want = Action.RETEST if t.effect.first_action == "retest" else Action.QUARANTINE
        assert rec.action is want, (t.fault, rec.action)
    unreachable = next(s for s, t in truth.faulty.items() if t.fault == "unreachable")
    assert res.hosts[unreachable].status is HostStatus.UNREACHABLE and unreachable not in records


def test_configure_reports_failed_and_unreachable_hosts(every_fault):
    cloud = every_fault
    prov = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    res = cloud.executor.configure(list(prov.instances.values()))
    bad = {h.slot: h for h in res.not_ok()}
    by_fault = {t.fault: s for s, t in cloud.truth().faulty.items()}
    assert set(bad) == {by_fault["unreachable"], by_fault["configure-failed"]}
    assert bad[by_fault["unreachable"]].status is HostStatus.UNREACHABLE
    assert bad[by_fault["configure-failed"]].status is HostStatus.FAILED and bad[by_fault["configure-failed"]].task
    assert res.duration_s == cloud.config.durations.configure + cloud.config.durations.image_pull


def test_remediation_clears_what_the_research_says_and_nothing_else(every_fault, tmp_path):
    cloud = every_fault
    prov = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    by_fault = {t.fault: s for s, t in cloud.truth().faulty.items()}
    retest = [k for k, e in EFFECTS.items() if e.first_action == "retest" and k in GATED_KINDS]
    insts = [prov.instances[by_fault[k]] for k in retest]
    _, first = gate(cloud, insts, tmp_path / "first")
    # a GPU reset applies a pending row remap, but the GSP timeout's Xid stays in this boot's log
    for i in insts:
        assert cloud.executor.remediate(i, "reset-gpu").status is HostStatus.OK
    _, after_reset = gate(cloud, insts, tmp_path / "reset", previous=first)
    assert after_reset[by_fault["row-remap-pending"]].action is Action.ADMIT
    assert after_reset[by_fault["xid-119"]].action is Action.QUARANTINE
    assert after_reset[by_fault["ecc-uncorrectable"]].action is Action.QUARANTINE
    # a reboot starts a new boot: the transient Xid is gone; recurring faults come back
    for i in insts:
        cloud.executor.remediate(i, "reboot")
    _, after_reboot = gate(cloud, insts, tmp_path / "reboot", previous=first)
    finals = {k: after_reboot[by_fault[k]].action for k in retest}
    assert finals == {k: Action.ADMIT if EFFECTS[k].final == "admitted" else Action.QUARANTINE for k in retest}


@pytest.mark.parametrize("systemic", ["nccl-socket-fallback", "driver-broken"])
def test_a_systemic_fault_fails_every_node(cloud_for, tmp_path, systemic):
    cloud = cloud_for(make_spec(target_gpus=80, systemic=systemic))
    prov = cloud.provisioner.provision(1, cloud.plan.batch_nodes(1))
    _, records = gate(cloud, list(prov.instances.values()), tmp_path / "b")
    codes = cloud.truth().systemic_codes
    assert records and all(r.action is Action.QUARANTINE and r.reason_codes[0] == codes[0]
                           for r in records.values()), {s: r.reason_codes for s, r in records.items()}


def test_the_fields_quirks_get_the_verdicts_the_fault_table_names(cloud_for, tmp_path):
    """Issue 19's quirks, rendered as the real tools print them, through the real gates: a fabric
    that reports unhealthy or degraded health, is not registered yet or lacks resources, a -q cut
    off mid-document, a MIG-form Xid, a missing dcgmi, half the EFA devices, a -beta plugin."""
    cloud = cloud_for(make_spec(target_gpus=160, faults={k: 1 for k in QUIRK_KINDS}))
    prov = cloud.provisioner.provision(len(cloud.plan.batches), cloud.plan.nodes)
    _, records = gate(cloud, list(prov.instances.values()), tmp_path / "b")
    truth = cloud.truth()
    assert {t.fault for t in truth.faulty.values()} == set(QUIRK_KINDS)
    for slot, rec in records.items():
        t = truth.faulty.get(slot)
        if t is None:
            assert rec.action is Action.ADMIT, (slot, rec.reason_codes)
            continue
        want = Action.RETEST if t.effect.first_action == "retest" else Action.QUARANTINE
        assert (rec.action, rec.reason_codes[:1]) == (want, t.effect.reason_codes[:1]), (t.fault, rec.reason_codes)
