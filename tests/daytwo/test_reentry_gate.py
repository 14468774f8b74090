"""Every way back into the pool goes through the re-admission gate (issue 22 item 5), one test per
path on the simulated crash40: a reboot, a GPU reset (the remediation ladder), a hand repair then
`pool clear`, a replacement, an upgrade, and a drain lifted by hand (`pool readmit`). Each ends with
the node admitted only on a record decided after the path began, for the BOM the node runs now
(the stack's, or the upgrade's target) and the instance now in the slot (an instance runs one
image: a new image is a new instance), and the pool holding that record's digest. The same path
with the fault still there ends quarantined, with the old record left alone."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Callable

import pytest

from gpufleet.bom import load_bom
from gpufleet.daytwo import lifecycle
from gpufleet.daytwo.context import open_day_two
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.pool.protocol import record_digest
from gpufleet.project import load_project
from tests.daytwo.fleet import STACK, admitted, gpufleet, pool_doc, state_dir
from tests.daytwo.test_upgrade import retarget


@pytest.fixture(autouse=True)
def _project_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_PROJECT", str(tmp_path / "project"))


def record_of(fleet: Path, slot: str) -> dict:
    return json.loads((state_dir(fleet) / "records" / f"{slot}.json").read_text())


def latest_decision(fleet: Path) -> datetime:
    return max(datetime.fromisoformat(json.loads(p.read_text())["decided_at"])
               for p in (state_dir(fleet) / "records").glob("*.json"))


def instance_in(fleet: Path, slot: str) -> str:
    with open_day_two(STACK, "test", project=load_project(fleet), pool_only=False) as d:
        inst = d.instance(slot)
    assert inst is not None
    return inst.instance_id


def quarantined_with(fleet: Path, kind: str, index: int) -> str:
    """An admitted node that develops `kind`, quarantined as an alert would."""
    slot = admitted(fleet)[index]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", kind).exit_code == 0
    with open_day_two(STACK, "test", project=load_project(fleet)) as d:
        lifecycle.quarantine(d, slot, kind, f"the gates found {kind}", "alert")
    return slot


def stack_bom(fleet: Path) -> str:
    stack = (fleet / "stacks" / f"Pulumi.{STACK}.yaml").read_text()
    bom = next(line.split(":", 1)[1].strip() for line in stack.splitlines() if line.strip().startswith("bom:"))
    return load_bom(fleet / bom).digest()


def _reboot(fleet: Path) -> tuple[str, int]:
    slot = quarantined_with(fleet, "xid-119", 0)  # GSP RPC timeout: the reset does not cure it, the reboot does
    out = gpufleet(fleet, "ops", "remediation", "run", "-s", STACK, slot, "--reason", "alert")
    assert "cured by reboot" in out.output or out.exit_code != 0, out.output
    return slot, out.exit_code


def _reset(fleet: Path) -> tuple[str, int]:
    slot = quarantined_with(fleet, "row-remap-pending", 1)  # a GPU reset applies the pending remap
    out = gpufleet(fleet, "ops", "remediation", "run", "-s", STACK, slot, "--reason", "alert")
    assert "cured by reset-gpu" in out.output or out.exit_code != 0, out.output
    return slot, out.exit_code


def _repair_then_clear(fleet: Path) -> tuple[str, int]:
    slot = quarantined_with(fleet, "xid-79", 2)
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--clear").exit_code == 0  # fixed by hand
    out = gpufleet(fleet, "pool", "clear", "-s", STACK, slot, "--reason", "reseated the GPU")
    return slot, out.exit_code


def _replace(fleet: Path) -> tuple[str, int]:
    slot = quarantined_with(fleet, "xid-79", 3)
    out = gpufleet(fleet, "pool", "replace", "-s", STACK, slot, "--reason", "fell off the bus")
    return slot, out.exit_code


def _hand_drain_lifted(fleet: Path) -> tuple[str, int]:
    slot = admitted(fleet)[4]
    with open_day_two(STACK, "test", project=load_project(fleet)) as d:  # a person's drain, seen as the pool's
        d.pool.quarantine(slot, "slurm-drain", "fans loud, ticket 4711")
    out = gpufleet(fleet, "pool", "readmit", "-s", STACK, slot, "--reason", "fans replaced")
    return slot, out.exit_code


PATHS: dict[str, Callable[[Path], tuple[str, int]]] = {
    "reboot": _reboot, "reset": _reset, "repair": _repair_then_clear, "replacement": _replace,
    "hand-drain": _hand_drain_lifted,
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_way_back_admits_only_on_a_fresh_record_for_the_current_bom_and_instance(fleet, path):
    began = latest_decision(fleet)  # the simulator's clock: every decision so far was made before this path
    slot, code = PATHS[path](fleet)
    assert code == 0, (path, code)
    node = pool_doc(fleet)["nodes"][slot]
    record = record_of(fleet, slot)
    assert node["state"] == "admitted" and record["action"] == "admit"
    assert datetime.fromisoformat(record["decided_at"]) > began  # decided by the gate on this path
    assert record["bom_digest"] == stack_bom(fleet)  # for the BOM the node runs
    assert record["instance_id"] == node["instance_id"] == instance_in(fleet, slot)  # and the instance in the slot
    assert node["record_digest"] == record_digest(AdmissionRecord.model_validate(record))


def test_the_upgrade_admits_each_node_on_a_fresh_record_for_the_target_bom(fleet):
    slots = admitted(fleet)
    before = {s: record_of(fleet, s) for s in slots}
    target = retarget(fleet)
    out = gpufleet(fleet, "upgrade", "-s", STACK, "--previous-bom", str(fleet / "previous-bom.yaml"))
    assert out.exit_code == 0, out.output
    digest = load_bom(fleet / target).digest()
    for slot in slots:
        node, record = pool_doc(fleet)["nodes"][slot], record_of(fleet, slot)
        assert node["state"] == "admitted" and record["bom_digest"] == digest != before[slot]["bom_digest"]
        assert record["decided_at"] > before[slot]["decided_at"] and record["instance_id"] == node["instance_id"]
        assert node["record_digest"] == record_digest(AdmissionRecord.model_validate(record))


@pytest.mark.parametrize("path", ["repair", "hand-drain"])
def test_a_way_back_whose_node_still_fails_leaves_it_out_and_its_record_unchanged(fleet, path):
    if path == "repair":
        slot = quarantined_with(fleet, "xid-79", 2)  # not repaired: the fault is still there
        out = gpufleet(fleet, "pool", "clear", "-s", STACK, slot, "--reason", "looked fine")
    else:
        slot = quarantined_with(fleet, "xid-79", 4)
        out = gpufleet(fleet, "pool", "readmit", "-s", STACK, slot, "--reason", "looked fine")
    before = record_of(fleet, slot)
    assert out.exit_code == 3, out.output
    assert pool_doc(fleet)["nodes"][slot]["state"] in ("quarantined", "blacklisted")
    assert record_of(fleet, slot) == before  # no admission record for a node that did not pass
