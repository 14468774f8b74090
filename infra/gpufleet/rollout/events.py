"""The journal events the rollout writes, built from what a step decided (pure: no journal, no ports).

Why apart from the steps: an event's shape is the journal's contract with the state fold
(gpufleet.rollout.state) and with every report that reads it; the steps decide, these say it the
one way the fold reads it. The keys' order is part of the line written: keep it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gpufleet.gates.admission import AdmissionRecord, BatchNetworkResult
from gpufleet.gates.verdict import Action, Verdict
from gpufleet.pool.protocol import record_digest
from gpufleet.rollout import baselines as bl
from gpufleet.ports import ProvisionResult
from gpufleet.rollout.state import NodeState

Event = dict[str, Any]


def rollout_halted(reason: str) -> Event:
    return {"type": "rollout", "to": "halted", "reason": reason}


def batch_halted(k: int, reason: str) -> Event:
    return {"type": "batch", "batch": k, "to": "halted", "reason": reason}


def provisioned(k: int, asked: Sequence[str], result: ProvisionResult, seconds: float) -> list[Event]:
    """What a provision call answered for the slots asked: the instances it gave, then the slots
    it could not fill with the provider's reason (left provisioning, to be asked again)."""
    up = {s: result.instances[s] for s in asked if s in result.instances}
    out = []
    if up:
        out.append({"type": "nodes", "batch": k, "to": "provisioned", "stage": "provision",
                    "duration_s": seconds,
                    "nodes": {s: {"instance_id": i.instance_id, "private_ip": i.private_ip}
                              for s, i in up.items()}})
    short = {s: result.shortfall.get(s, "the provider returned no instance") for s in asked if s not in up}
    if short:
        out.append({"type": "nodes", "batch": k, "to": "provisioning", "stage": "provision",
                    "duration_s": 0 if up else seconds,
                    "nodes": {s: {"shortfall": why} for s, why in short.items()}})
    return out


def quarantine_decided(k: int, failures: Mapping[str, tuple[str, str, dict | None]]) -> Event | None:
    """Quarantine verdicts {slot: (code, reason, record)} as one event; None when there are none."""
    if not failures:
        return None
    nodes = {}
    for slot, (code, reason, record) in failures.items():
        entry: dict[str, Any] = {"action": "quarantine", "reason_code": code, "reason": reason}
        if record is not None:
            entry["record"] = record
            entry["record_digest"] = record_digest(AdmissionRecord.model_validate(record))
        nodes[slot] = entry
    return {"type": "decided", "batch": k, "nodes": nodes}


def node_result(n: NodeState, r: AdmissionRecord, passed: str) -> dict[str, Any]:
    """One node's journaled outcome: `passed` ("pass" to the baselines, "admit"), quarantine, or
    remediate; a node that already had its retest is quarantined instead of a second one."""
    if r.action is Action.RETEST and n.previous is not None:
        r = r.model_copy(update={"verdict": Verdict.QUARANTINE, "action": Action.QUARANTINE,
                                 "message": "failed again after remediation: " + r.message})
    record = r.model_dump(mode="json")
    if r.action is Action.ADMIT:
        out: dict[str, Any] = {"result": passed, "record": record}
        if passed == "admit":
            out["record_digest"] = record_digest(r)
        return out
    code = r.reason_codes[0] if r.reason_codes else ("retest" if r.action is Action.RETEST else "quarantined")
    result = "quarantine" if r.action is Action.QUARANTINE else "remediate"
    return {"result": result, "record": record, "reason_code": code, "reason": r.message}


def retest_entry(action: str, remediation: Mapping[str, Any], codes: Sequence[str]) -> dict[str, Any]:
    """A remediated node's retest: the action taken and the outcome the retest is judged against."""
    r = remediation
    return {"action": action, "outcome": {"verdict": r["verdict"], "action": r["action"],
                                          "attempt": r.get("attempt", 1),
                                          "reason_codes": list(codes), "message": r.get("message", "")}}


def network_measured(k: int, runner: bl.NetworkRunner, net: BatchNetworkResult) -> Event:
    """The multi-node baselines' figures (every run by scale); the nodes' verdicts are added to it."""
    scales: dict[str, list[dict[str, Any]]] = {}
    for run in runner.runs:
        scales.setdefault(str(run.scale), []).append(run.model_dump(mode="json"))
    return {"type": "network", "batch": k, "link_faults": [list(p) for p in net.link_faults],
            "ring_faults": [list(g) for g in net.ring_faults], "unresolved": list(net.unresolved),
            "rounds": net.rounds, "runs": net.runs, "scales": scales, "duration_s": runner.seconds}


def network_skipped(k: int) -> Event:
    return {"type": "network", "batch": k, "skipped": "no second node to pair with"}
