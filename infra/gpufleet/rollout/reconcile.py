"""The journal checked against the world on resume: the provider's instances by slot and the
pool's node states, every difference named, and the ones the journal can safely follow adopted.

Why: the journal is the rollout's memory, but it can be behind (a hand-truncated file, a copy).
A slot whose provider instance is not the journal's would otherwise be configured and gated on an
instance that no longer runs (stopped by a replacement the journal never heard of): unreachable,
quarantined, and after a second failure blacklisted though healthy. Pure: the orchestrator reads
the ports and journals the event this builds.
"""

from __future__ import annotations

from typing import Any, Mapping

from gpufleet.rollout.state import NodeStage, RolloutState

S = NodeStage
# stages whose node the journal gates on a recorded instance, still to be decided or replaced
ADOPT_FROM = (S.PROVISIONED, S.CONFIGURING, S.CONFIGURED, S.PREFLIGHT, S.BASELINE, S.QUARANTINED)


def differences(state: RolloutState, inventory: Mapping[str, Any],
                pool_states: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """slot -> what differs ({journal_instance, provider_instance, pool, action}).

    `action`: "adopt" (the provider runs a newer instance of a slot the journal has not decided:
    the node restarts its gates on it, a spare counted), "report" (an admitted node's instance
    changed, or the provider has none for it, or the pool disagrees: said, not acted on: day two
    replaces admitted nodes through its own journal, and a missing instance fails its next stage)."""
    out: dict[str, dict[str, Any]] = {}
    for slot, n in sorted(state.nodes.items()):
        if not n.has_instance or n.instance_id is None:
            continue  # no instance recorded yet: provisioning asks the provider again
        current = inventory.get(slot)
        provider = getattr(current, "instance_id", None)
        pool = pool_states.get(slot)
        entry = {"journal_instance": n.instance_id, "provider_instance": provider, "journal_stage": n.stage.value,
                 "pool": pool}
        if provider is not None and provider != n.instance_id:
            running = (b := state.batches.get(n.batch)) is not None and b.stage.value == "running"
            adopt = running and n.stage in ADOPT_FROM and not n.blacklisted
            out[slot] = {**entry, "action": "adopt" if adopt else "report",
                         "private_ip": getattr(current, "private_ip", None)}
        elif provider is None:
            out[slot] = {**entry, "action": "report"}
        elif pool == "admitted" and n.stage is not S.ADMITTED and n.decision is None:
            out[slot] = {**entry, "action": "report"}
    return out


def no_world_behind(state: RolloutState, inventory: Mapping[str, Any]) -> int:
    """How many instances the journal names when the provider runs none of them (0 otherwise).

    Why refuse then: a journal whose every instance is unknown to the provider describes another
    world (copied from another project, or a cloud torn down since); trusted, it reports a pool
    that does not exist ("complete 125/125") or gates healthy slots on instances that never ran."""
    recorded = {n.instance_id for n in state.nodes.values() if n.has_instance and n.instance_id}
    running = {getattr(i, "instance_id", None) for i in inventory.values()}
    return 0 if not recorded or recorded & running else len(recorded)
