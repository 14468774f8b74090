"""The journal checked against the world on resume: the provider's instances by slot and the
pool's node states, every difference named, and the ones the journal can safely follow adopted.

Why: the journal is the rollout's memory, but it can be behind (a hand-truncated file, a copy).
A slot whose provider instance is not the journal's would otherwise be configured and gated on an
instance that no longer runs (stopped by a replacement the journal never heard of): unreachable,
quarantined, and after a second failure blacklisted though healthy. And the spares it bought would
be forgotten: every instance carries its replacement generation as a tag, so the count the spare
budget is checked against is rebuilt from the provider too (`spares`). Pure: the orchestrator reads
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
    the node restarts its gates on it, a spare counted; `provider_generation` is its tag), "report" (an admitted node's instance
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
                         "private_ip": getattr(current, "private_ip", None),
                         "provider_generation": generation(current)}
        elif provider is None:
            out[slot] = {**entry, "action": "report"}
        elif pool == "admitted" and n.stage is not S.ADMITTED and n.decision is None:
            out[slot] = {**entry, "action": "report"}
    return out


def generation(instance: Any) -> int:
    """An inventory instance's replacement-generation tag (gpufleet.tagging.GENERATION); 0 without one."""
    return int(getattr(instance, "generation", 0) or 0)


def spares(state: RolloutState, inventory: Mapping[str, Any], found: Mapping[str, Mapping[str, Any]],
           budget: int) -> dict[str, Any] | None:
    """The spares used once the journal is reconciled: per slot the larger of the journal's count
    (plus one for a slot `found` adopts) and the generation tag of the provider's instance; None
    when the tags show no more than the journal.

    Why per slot and the larger: the journal only loses events when cut (it never invents a
    replacement), and a tag only counts what the provider launched, so each is a lower bound;
    untagged (older) instances read 0 and leave the journal's count. Summed over every slot either
    side knows (a slot the cut journal never reached included), it is what the budget is checked
    against, so a resumed rollout never buys past `budget` however much of the journal was lost.
    Returns {journal, provider, used, budget, slots: {slot: {journal, provider}}} for the event."""
    journal = {slot: state.replacements_of(slot) for slot in {*state.nodes, *state.spare_floor}}
    adopted = {slot for slot, d in found.items() if d.get("action") == "adopt"}
    provider = {slot: generation(i) for slot, i in inventory.items()}
    behind = {slot: {"journal": journal.get(slot, 0), "provider": g} for slot, g in sorted(provider.items())
              if g > journal.get(slot, 0) + (slot in adopted)}
    if not behind:
        return None
    used = sum(max(journal.get(slot, 0) + (slot in adopted), provider.get(slot, 0))
               for slot in {*journal, *provider})
    return {"journal": sum(journal.values()), "provider": sum(provider.values()), "used": used, "budget": budget,
            "slots": behind}


def no_world_behind(state: RolloutState, inventory: Mapping[str, Any]) -> int:
    """How many instances the journal names when the provider runs none of them (0 otherwise).

    Why refuse then: a journal whose every instance is unknown to the provider describes another
    world (copied from another project, or a cloud torn down since); trusted, it reports a pool
    that does not exist ("complete 125/125") or gates healthy slots on instances that never ran."""
    recorded = {n.instance_id for n in state.nodes.values() if n.has_instance and n.instance_id}
    running = {getattr(i, "instance_id", None) for i in inventory.values()}
    return 0 if not recorded or recorded & running else len(recorded)
