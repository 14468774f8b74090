"""A drain set by hand on a real local Slurm (slurmctld and one slurmd per node, `gpufleet pool up`):
`gpufleet pool` sees it with its reason, the patrol never undoes it, and the node goes back to work
only through the re-admission gate (`gpufleet pool readmit`), never by a clear of the drain alone."""

from __future__ import annotations

import json
import time

from tests.daytwo.fleet import gpufleet
from tests.daytwo.test_patrol_slurm import STACK, sh, slurm_project  # noqa: F401  (pytest fixture)

REASON = "fans loud, ticket 4711"


def _slurm_state(conf, node: str) -> tuple[str, str]:
    """sinfo's state and reason, once the node answers (after a reconfigure it reads `idle*` for a moment)."""
    deadline = time.monotonic() + 15
    while True:
        # one row per partition the node is in (root also sees the hidden gpufleet-gates): the first is the pool's
        rows = sh(conf, "sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").strip().splitlines()
        state, _, reason = (rows[0] if rows else "").partition("|")
        if not state.endswith("*") or time.monotonic() > deadline:
            return state, reason
        time.sleep(0.3)


def test_a_hand_drain_is_seen_kept_with_its_reason_and_lifted_only_through_the_gate(slurm_project):  # noqa: F811
    root, conf = slurm_project
    if not conf.exists():
        conf = next((root / ".gpufleet" / STACK / "slurm").rglob("slurm.conf"))
    out = gpufleet(root, "rollout", "-s", STACK)
    assert out.exit_code == 0, out.output
    before = json.loads(gpufleet(root, "pool", "-s", STACK, "--json").output)
    assert before["counts"]["admitted"] == 8 and before["quarantined"] == [], before
    node = "pss-b0007-n00007"
    assert _slurm_state(conf, node) == ("idle", "none")
    sh(conf, "scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={REASON}")

    doc = json.loads(gpufleet(root, "pool", "-s", STACK, "--json").output)
    seen = {n["slot"]: n for n in doc["quarantined"]}
    assert list(seen) == [node] and doc["counts"]["admitted"] == 7, doc
    assert seen[node]["reason_code"] == "slurm-drain" and seen[node]["reason"] == REASON
    assert f"{node} (block 7, 0 failure(s)) slurm-drain: {REASON}" in gpufleet(root, "pool", "-s", STACK).output

    out = gpufleet(root, "patrol", "-s", STACK)
    assert out.exit_code == 0, out.output
    assert _slurm_state(conf, node) == ("drained", REASON)  # the patrol left the person's drain alone

    out = gpufleet(root, "pool", "readmit", "-s", STACK, node, "--reason", "fans replaced")
    assert out.exit_code == 0 and "admitted again" in out.output, out.output
    state, reason = _slurm_state(conf, node)
    assert state == "idle" and reason == "none", (state, reason)
    events = [json.loads(line) for line in (root / ".gpufleet" / STACK / "daytwo.jsonl").read_text().splitlines()]
    assert [(e["slot"], e["action"], e["why"]) for e in events if e["type"] == "pool"] == [
        (node, "readmit", "fans replaced")]


def test_a_gpufleet_drain_lifted_by_hand_is_reported_by_the_patrol_and_left_as_it_is(slurm_project):  # noqa: F811
    """The other way round: gpufleet quarantined a node, a person resumed it in Slurm. Slurm runs jobs
    there, gpufleet has no admission record: the patrol says so and changes nothing (no drain set
    again behind the person's back); `gpufleet pool readmit` is the way back."""
    root, conf = slurm_project
    if not conf.exists():
        conf = next((root / ".gpufleet" / STACK / "slurm").rglob("slurm.conf"))
    assert gpufleet(root, "rollout", "-s", STACK).exit_code == 0
    node = "pss-b0006-n00006"
    assert gpufleet(root, "sim", "fault", "-s", STACK, "--slot", node, "--kind", "xid-48").exit_code == 0
    assert gpufleet(root, "patrol", "-s", STACK).exit_code == 3  # quarantined: drained in Slurm by gpufleet
    assert _slurm_state(conf, node)[0] == "drained"
    sh(conf, "scontrol", "update", f"NodeName={node}", "State=RESUME")  # lifted by hand
    assert _slurm_state(conf, node) == ("idle", "none")

    out = gpufleet(root, "patrol", "-s", STACK)
    assert f"the scheduler and gpufleet disagree on {node}" in out.output, out.output
    assert "no admission record" in out.output and "left as it is" in out.output
    assert _slurm_state(conf, node) == ("idle", "none")  # reported, not fixed
    events = [json.loads(line) for line in (root / ".gpufleet" / STACK / "daytwo.jsonl").read_text().splitlines()]
    last = [e for e in events if e["type"] == "patrol"][-1]
    assert list(last["disagreements"]) == [node] and node not in last["checked"]
