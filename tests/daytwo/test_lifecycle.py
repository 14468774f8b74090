"""The blacklist lifecycle on a rolled-out simulated stack: blacklist, clear and replace as
journaled pool operations (who and why), a replacement gated in full before admission, and a
replacement interrupted at each journaled step resumed without a second launch."""

from __future__ import annotations

import json

import pytest

from gpufleet.daytwo import actor, lifecycle
from gpufleet.daytwo.context import open_day_two
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.pool.protocol import record_digest
from gpufleet.project import load_project
from tests.daytwo.fleet import STACK, admitted, daytwo_events, gpufleet, ledger, pool_doc, state_dir


@pytest.mark.slow  # ~8 s
def test_blacklist_and_clear_are_journaled_with_who_and_why(fleet):
    slot = admitted(fleet)[0]
    out = gpufleet(fleet, "pool", "blacklist", "-s", STACK, slot, "--reason", "PDU alarm in rack 3", actor="bob@noc")
    assert out.exit_code == 0, out.output
    assert pool_doc(fleet)["nodes"][slot]["state"] == "blacklisted"
    out = gpufleet(fleet, "pool", "clear", "-s", STACK, slot, "--reason", "PDU replaced", actor="carol@noc")
    assert out.exit_code == 0 and "re-admission gate: admitted again" in out.output, out.output
    events = [e for e in daytwo_events(fleet) if e["type"] == "pool"]
    assert [(e["slot"], e["action"], e["who"], e["why"], e["state"]) for e in events] == [
        (slot, "blacklist", "bob@noc", "PDU alarm in rack 3", "blacklisted"),
        (slot, "clear", "carol@noc", "PDU replaced", "pending"),  # a clear alone puts nothing back to work
        (slot, "readmit", "carol@noc", "pool clear: PDU replaced", "admitted")]  # the gate does


def test_a_cleared_slot_whose_node_still_fails_its_gate_is_not_put_back_to_work(fleet):
    slot = admitted(fleet)[1]
    assert gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-48").exit_code == 0
    assert gpufleet(fleet, "pool", "blacklist", "-s", STACK, slot, "--reason", "xid 48").exit_code == 0
    out = gpufleet(fleet, "pool", "clear", "-s", STACK, slot, "--reason", "looks fine to me")
    assert out.exit_code == 3 and "xid-48" in out.output, out.output
    assert pool_doc(fleet)["nodes"][slot]["state"] == "quarantined"


def test_a_reason_is_required(fleet):
    slot = admitted(fleet)[0]
    for sub in ("blacklist", "clear", "replace"):
        out = gpufleet(fleet, "pool", sub, "-s", STACK, slot)
        assert out.exit_code == 2 and "--reason" in out.output, sub
    out = gpufleet(fleet, "pool", "blacklist", "-s", STACK, slot, "--reason", "   ")
    assert out.exit_code == 2 and "reason" in out.output
    assert daytwo_events(fleet) == [] and pool_doc(fleet)["nodes"][slot]["state"] == "admitted"


def test_replace_moves_the_slot_to_a_new_instance_gated_in_full(fleet):
    slot = admitted(fleet)[3]
    old = pool_doc(fleet)["nodes"][slot]["instance_id"]
    out = gpufleet(fleet, "pool", "replace", "-s", STACK, slot, "--reason", "noisy fans", actor="dave@ops")
    assert out.exit_code == 0, out.output
    node = pool_doc(fleet)["nodes"][slot]
    assert node["state"] == "admitted" and node["instance_id"] != old
    record = json.loads((state_dir(fleet) / "records" / f"{slot}.json").read_text())
    assert record["instance_id"] == node["instance_id"]
    assert node["record_digest"] == record_digest(AdmissionRecord.model_validate(record))
    checks = {c["check_id"] for c in record["checks"]}
    assert {"kernel.xid", "nccl.intra.busbw", "dcgm.diag", "nccl.multinode"} <= checks  # full gates, multi-node too
    assert any(k for k in record["busbw"]["multi_node_gbs"])  # measured with an admitted partner
    cloud = [e for e in ledger(fleet) if e.get("slot") == slot]
    assert [(e["event"], e.get("by")) for e in cloud][-2:] == [("stop", None), ("launch", "replace")]
    assert cloud[-2]["instance_id"] == old
    events = [e for e in daytwo_events(fleet) if e["type"] == "replace"]
    assert [e["to"] for e in events] == ["requested", "provisioned", "decided", "done"]
    assert events[0]["who"] == "dave@ops" and events[0]["why"] == "noisy fans" and events[0]["old_instance"] == old


def test_a_replacement_that_fails_its_gates_is_quarantined_exit_3(fleet):
    slot = admitted(fleet)[5]
    out = gpufleet(fleet, "sim", "fault", "-s", STACK, "--slot", slot, "--kind", "xid-79", "--slot-bound")
    assert out.exit_code == 0, out.output
    out = gpufleet(fleet, "pool", "replace", "-s", STACK, slot, "--reason", "xid 79 twice")
    assert out.exit_code == 3, out.output
    node = pool_doc(fleet)["nodes"][slot]
    assert node["state"] == "quarantined" and node["reason_code"] in ("gpu-count", "xid-79") and node["failures"] == 1
    decided = [e for e in daytwo_events(fleet) if e["type"] == "replace" and e["to"] == "decided"]
    assert decided[0]["action"] == "quarantine"


def test_a_blacklisted_slot_is_cleared_before_it_is_replaced(fleet):
    slot = admitted(fleet)[0]
    assert gpufleet(fleet, "pool", "blacklist", "-s", STACK, slot, "--reason", "bad slot").exit_code == 0
    out = gpufleet(fleet, "pool", "replace", "-s", STACK, slot, "--reason", "try again")
    assert out.exit_code == 1 and "pool clear" in out.output
    assert not [e for e in daytwo_events(fleet) if e["type"] == "replace"]


class Crash(Exception):
    pass


@pytest.mark.parametrize("after", [1, 2, 3])
def test_replace_interrupted_after_each_step_resumes_with_one_launch(fleet, after):
    slot = admitted(fleet)[7]
    project = load_project(fleet)
    with open_day_two(STACK, "pool replace", project=project) as d:
        def crash(n: int) -> None:
            if n == after:
                raise Crash()
        d.journal.on_append = crash
        with pytest.raises(Crash):
            lifecycle.replace(d, slot, "crash test")
    with open_day_two(STACK, "pool replace", project=project) as d:
        node, record, _ = lifecycle.replace(d, slot, "crash test")
    assert record is not None and node.state.value == "admitted"
    launches = [e for e in ledger(fleet) if e.get("slot") == slot and e.get("by") == "replace"]
    assert len(launches) == 1
    assert [e["to"] for e in daytwo_events(fleet) if e["type"] == "replace"] == [
        "requested", "provisioned", "decided", "done"]


def test_actor_names_the_aws_caller_or_the_os_user(monkeypatch):
    monkeypatch.delenv(actor.ENV, raising=False)

    class Sts:
        def get_caller_identity(self):
            return {"Arn": "arn:aws:sts::123456789012:assumed-role/ops/alice"}

    class Broken:
        def get_caller_identity(self):
            raise RuntimeError("no route to sts")

    assert actor.who(False, lambda: Sts()).startswith("arn:aws:sts::123456789012:assumed-role/ops/alice (")
    assert actor.who(False, lambda: Broken()) == actor.os_actor()
    assert actor.who(True, lambda: Sts()) == actor.os_actor()  # a simulated stack never asks AWS
    monkeypatch.setenv(actor.ENV, "ci-job-42")
    assert actor.who(False, lambda: Sts()) == "ci-job-42"
