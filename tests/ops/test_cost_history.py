"""The cost report's pool history read from a real rollout's journals (the day-two fleet: the
simulated `crash40` stack rolled out once per session, with quarantines and replacements): each slot's last state in the history is its state in the pool, so the idle
and quarantine figures start from what the rollout really journaled, not from a hand-made shape."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from gpufleet.cost.command import read_history
from gpufleet.cost.pool_history import ADMITTED, QUARANTINED, by_state
from gpufleet.project import find_project
from gpufleet.spec import load_stack_path
from tests.daytwo.fleet import STACK, pool_doc

POOL_TO_HISTORY = {"admitted": ADMITTED, "quarantined": QUARANTINED, "blacklisted": QUARANTINED}


def test_the_history_of_a_real_rollout_ends_in_the_pools_states(fleet_base: Path) -> None:
    project = find_project(fleet_base)
    history, note, problems = read_history(load_stack_path(project.stack_file(STACK)), project, STACK)
    assert history and not note and not problems
    pool = pool_doc(fleet_base)["nodes"]
    last = {slot: changes[-1][1] for slot, changes in history.items()}
    assert {s: POOL_TO_HISTORY[n["state"]] for s, n in pool.items()} == {s: last[s] for s in pool}
    first = min(c[0][0] for c in history.values())
    now = datetime.now(timezone.utc).timestamp()
    admitted = by_state(history, ADMITTED, (first, now), now)
    assert {s for s, n in pool.items() if n["state"] == "admitted"} <= set(admitted)
    assert all(spans[-1][1] == now for s, spans in admitted.items() if pool[s]["state"] == "admitted")
    # the rollout quarantined faulty nodes and replaced them: closed quarantine intervals, billed as such
    quarantined = by_state(history, QUARANTINED, (first, now), now)
    assert quarantined and all(spans[-1][1] < now for s, spans in quarantined.items() if pool[s]["state"] == "admitted")
