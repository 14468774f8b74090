"""Pipelining's one thread: the next batch provisioned in a worker while this batch is gated.

Why here: this is the concurrency of a rollout that works one batch at a time (the window's
worker threads, one per batch in flight, are `gpufleet.rollout.window_threads`). One provisioner call runs at a
time (two `pulumi up` on one stack collide), so every other provisioner call joins the worker
first, and what the worker bought is journaled on join (a halt never forgets instances it bought).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

from gpufleet.plan.model import NodeSlot
from gpufleet.ports import ProvisionResult, Provisioner

Record = Callable[[int, Sequence[str], ProvisionResult, float], None]


class ProvisionAhead:
    def __init__(self, provisioner: Provisioner, record: Record) -> None:
        self.provisioner, self.record = provisioner, record
        self._worker: ThreadPoolExecutor | None = None
        self._ahead: dict[int, tuple[list[str], Future[ProvisionResult]]] = {}

    def __contains__(self, k: int) -> bool:
        return k in self._ahead

    def submit(self, k: int, slots: Sequence[NodeSlot]) -> None:
        """Provision batch k in the worker thread."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="provision-ahead")
        self._ahead[k] = ([s.name for s in slots], self._worker.submit(self.provisioner.provision, k, slots))

    def take(self, k: int) -> Future[ProvisionResult] | None:
        """Batch k's call in flight, now the caller's to wait for and record; None when there is none."""
        entry = self._ahead.pop(k, None)
        return None if entry is None else entry[1]

    def join(self) -> None:
        """Wait for every call in flight and record what it provisioned."""
        for k, (asked, future) in sorted(self._ahead.items()):
            result = future.result()
            self.record(k, asked, result, result.duration_s)
        self._ahead.clear()

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
