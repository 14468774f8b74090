"""A simulated stack's side of destroy: its cloud's ledger, its pool file, its local Slurm.

Why the ledger gets real `terminate` events: `gpufleet sim` and the tests read what the simulated
cloud did from it, so a destroy is on record there like a replacement's terminate. Emptying the
world then moves its files aside (`<state_dir>/destroyed.<stamp>/`), never deletes them, like
`rollout --restart` does; a later rollout meets a fresh simulated cloud whose seeded faults come back.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from gpufleet.durable import fsync_dir
from gpufleet.lifecycle.destroy_plan import NodeRef
from gpufleet.pool.sim import POOL_FILE, SimPool
from gpufleet.sim import world as W

SIM_DIR = "sim"
SLURM_DIR = "slurm"
# what described the destroyed cluster's nodes: admission records, raw bundles, baselines, acceptance
CLUSTER_RECORDS = ("records", "bundles", "baselines", "acceptance")


def ledger(state_dir: Path) -> W.Ledger | None:
    path = state_dir / SIM_DIR / W.LEDGER
    return W.Ledger(path) if path.exists() else None


def nodes(state_dir: Path) -> tuple[NodeRef, ...]:
    """The simulated cloud's running GPU node instances."""
    led = ledger(state_dir)
    if led is None:
        return ()
    return tuple(NodeRef(slot, i.batch, i.instance_id) for slot, i in sorted(led.current().items()))


def world_files(state_dir: Path) -> tuple[str, ...]:
    """What of the simulated world is on disk (relative names): the cloud, the pool, the local Slurm's
    folder, and the records of the nodes (a new cluster's upgrade must not compare with them)."""
    return tuple(name for name in (SIM_DIR, POOL_FILE, SLURM_DIR, *CLUSTER_RECORDS) if (state_dir / name).exists())


class SimTerminator:
    """Terminates the simulated instances of slots in the ledger (a slot without one is skipped)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def terminate(self, batch: int, slots: Sequence[str]) -> list[str]:
        led = ledger(self.state_dir)
        if led is None:
            return []
        current = led.current()
        events = [{"event": "terminate", "slot": s, "instance_id": current[s].instance_id, "by": "destroy"}
                  for s in slots if s in current]
        led.append(events)
        return [e["instance_id"] for e in events]


class SimJobs:
    """Cancels the simulator pool's work on slots (its scheduler side is the pool file)."""

    def __init__(self, pool: SimPool) -> None:
        self.pool = pool

    def cancel(self, slots: Sequence[str]) -> None:
        self.pool.end_work(slots)


class SimWorldRemover:
    """Stops the local Slurm (when the stack has one), then moves the world's files aside."""

    def __init__(self, state_dir: Path, stop_slurm: Any = None) -> None:
        self.state_dir = state_dir
        self.stop_slurm = stop_slurm  # () -> number of daemons stopped; None: no local Slurm

    def remove(self, targets: Sequence[str]) -> Mapping[str, Any]:
        stopped = self.stop_slurm() if self.stop_slurm is not None and (self.state_dir / SLURM_DIR).exists() else 0
        present = [name for name in targets if (self.state_dir / name).exists()]
        moved_to = None
        if present:
            dest = self.state_dir / f"destroyed.{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            dest.mkdir(exist_ok=True)
            for name in present:
                os.replace(self.state_dir / name, dest / name)
            lock = self.state_dir / "pool.lock"  # the pool file's lock goes with it
            if lock.exists() and POOL_FILE in present:
                lock.unlink()
            fsync_dir(self.state_dir)
            moved_to = str(dest)
        return {"moved": present, "to": moved_to, "slurm_daemons_stopped": stopped}
