"""A shrink's released slots worked off through the ports: drain, wait for their jobs, release
from the pool, terminate the instances (gpufleet.plan.resize decided which whole blocks).

Why journaled step by step: each step is idempotent on the ports (a drained node registered
pending again changes nothing, a released slot is released again, a terminated slot has no
instance to terminate), and the journal says which step each slot has passed, so a rollout
killed mid-shrink resumes at the next step without draining or terminating anything twice.
Jobs are waited for, not ended: a drain still held at `drain_timeout_s` stops the rollout with
the holders named (exit 1); running it again waits again.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from gpufleet.errors import GpufleetError
from gpufleet.pool.protocol import HasHolders, PendingNode, Pool
from gpufleet.rollout.journal import Journal
from gpufleet.rollout.run_config import Adapters


class ShrinkHeld(GpufleetError):
    """Released slots still run jobs at the drain deadline (exit 1; rerun to wait again)."""


def busy_jobs(pool: Pool, slots: Sequence[str]) -> dict[str, int]:
    """Running jobs per slot from the pool (the emptiest blocks go first): holders where the pool
    names them, else 1 for a busy node."""
    state = pool.state()
    busy = [s for s in slots if (n := state.get(s)) is not None and n.busy]
    if not busy:
        return {}
    if isinstance(pool, HasHolders):
        counts: dict[str, int] = {}
        for h in pool.holders(busy):
            counts[h.slot] = counts.get(h.slot, 0) + 1
        return {s: counts.get(s, 1) for s in busy}
    return {s: 1 for s in busy}


def run_shrink(journal: Journal, adapters: Adapters, blocks: Mapping[str, tuple[int, str | None]],
               drain_timeout_s: float, poll_s: float = 5.0,
               sleep: Callable[[float], None] = time.sleep,
               monotonic: Callable[[], float] = time.monotonic) -> None:
    """Work the journal's releasing slots to the end and journal the resize finished.

    `blocks`: slot -> (block, partition), for the pool's pending registration (its drain)."""
    st = journal.state
    pool = adapters.pool

    def at(step: str) -> list[str]:
        return sorted(s for s, now in st.releasing.items() if now == step)

    pending = at("pending")
    if pending:
        inventory = adapters.provisioner.inventory()
        pool.register_pending([PendingNode(slot=s, block=blocks[s][0], partition=blocks[s][1],
                                           instance_id=getattr(inventory.get(s), "instance_id", None))
                               for s in pending if pool.state().get(s) is not None])
        deadline = monotonic() + drain_timeout_s
        while True:
            now = pool.state()
            busy = [s for s in pending if (n := now.get(s)) is not None and n.busy]
            if not busy:
                break
            if monotonic() >= deadline:
                held = [str(h) for h in pool.holders(busy)] if isinstance(pool, HasHolders) else busy
                raise ShrinkHeld(f"the shrink's drain did not finish within {drain_timeout_s:g} s: "
                                 f"{', '.join(held[:10])} still running; run the rollout again to wait again")
            sleep(poll_s)
        journal.append({"type": "release", "step": "drained", "nodes": {s: {} for s in pending}})
    drained = at("drained")
    if drained:
        for s in drained:
            pool.release(s)
        journal.append({"type": "release", "step": "released", "nodes": {s: {} for s in drained}})
    released = at("released")
    if released:
        terminate = getattr(adapters.provisioner, "terminate", None)
        if terminate is None:
            raise GpufleetError("this stack's provisioner cannot terminate instances: the shrink stops with "
                                f"{len(released)} slot(s) out of the pool, their instances running")
        before = adapters.provisioner.inventory()
        terminate(released)
        journal.append({"type": "release", "step": "terminated", "nodes": {
            s: {"instance_id": getattr(before.get(s), "instance_id", None)} for s in released}})
    if st.resize is not None and not st.releasing:
        journal.append({"type": "resize", "to": "finished"})
