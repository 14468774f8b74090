"""The window's batches on real ports: one worker thread per batch in flight, one lock over the rest.

Why this shape (issue 21 item 4): a real stack's port calls take minutes (an `up`, an Ansible run,
an NCCL round), so batches in flight must make them at the same time; everything else (reading the
folded journal, deciding, appending an event) stays under one lock, the `RunLock`. A worker holds
it while it runs the orchestrator's code and lets go only for the length of a port call, so the
journal sees one thread at a time and its order is the order in which port calls completed: a
resumed rollout folds it like any other, and each batch's next action is again a function of it.

The ports each keep their own rule: one provisioner call at a time (two `pulumi up` on one stack
collide), at most `fabric_tests` multi-node rounds at once (the plan's fabric budget); executor
calls run side by side. A failure in one worker (or a crash test's raise) aborts the others at
their next return from a port call, before they journal anything more, as a real crash would.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from gpufleet.rollout.run_config import Adapters


class Aborted(Exception):
    """Another worker failed: this one stops before journaling anything more."""


class RunLock:
    """A lock that knows its owner, with a condition to wait on and an abort flag."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._owner: int | None = None
        self.aborted = False

    def acquire(self) -> None:
        """Take the lock; raises `Aborted` (holding it) once the run is aborted."""
        self._lock.acquire()
        self._owner = threading.get_ident()
        if self.aborted:
            raise Aborted()

    def release(self) -> None:
        self._owner = None
        self._lock.release()

    def held(self) -> bool:
        return self._owner == threading.get_ident()

    def wait(self, timeout: float | None = None) -> None:
        """Let go until another thread notifies (held on return)."""
        self._owner = None
        self._cond.wait(timeout)
        self._owner = threading.get_ident()

    def check(self) -> None:
        """Raises `Aborted` once the run is aborted (after a wait, before acting on what changed)."""
        if self.aborted:
            raise Aborted()

    def notify(self) -> None:
        if self.held():
            self._cond.notify_all()

    @contextmanager
    def outside(self) -> Iterator[None]:
        """A port call made without the lock (a no-op where this thread does not hold it)."""
        if not self.held():
            yield
            return
        self._cond.notify_all()  # state may have changed since the last wake-up
        self.release()
        try:
            yield
        finally:
            self.acquire()


class _Forward:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Provisioner(_Forward):
    """One provisioner call at a time, each outside the run's lock."""

    def __init__(self, inner: Any, lock: RunLock) -> None:
        super().__init__(inner)
        self._run, self._one = lock, threading.Lock()

    def provision(self, batch: int, slots: Sequence[Any]) -> Any:
        with self._run.outside(), self._one:
            return self._inner.provision(batch, slots)

    def replace(self, slot: Any, action: Any, *args: Any) -> Any:
        with self._run.outside(), self._one:
            return self._inner.replace(slot, action, *args)

    def inventory(self) -> Any:
        with self._run.outside(), self._one:
            return self._inner.inventory()


class _Executor(_Forward):
    """Configure, preflight and remediation outside the run's lock, batches side by side."""

    def __init__(self, inner: Any, lock: RunLock) -> None:
        super().__init__(inner)
        self._run = lock

    def configure(self, instances: Sequence[Any]) -> Any:
        with self._run.outside():
            return self._inner.configure(instances)

    def preflight(self, instances: Sequence[Any], dest: Any) -> Any:
        with self._run.outside():
            return self._inner.preflight(instances, dest)

    def remediate(self, instance: Any, action: Any) -> Any:
        with self._run.outside():
            return self._inner.remediate(instance, action)


class _Launcher(_Forward):
    """A round of multi-node tests outside the run's lock, at most the fabric budget's at once."""

    def __init__(self, inner: Any, lock: RunLock, fabric: threading.Semaphore) -> None:
        super().__init__(inner)
        self._run, self._fabric = lock, fabric

    def run(self, specs: Sequence[Any], timeout_s: float) -> Any:
        with self._run.outside(), self._fabric:
            return self._inner.run(specs, timeout_s)


class _Pool(_Forward):
    """The pool's writes stay under the run's lock (short, and not every pool is thread-safe);
    its launcher's rounds do not."""

    def __init__(self, inner: Any, lock: RunLock, fabric: threading.Semaphore) -> None:
        super().__init__(inner)
        self._run, self._fabric = lock, fabric

    def launcher(self) -> Any:
        return _Launcher(self._inner.launcher(), self._run, self._fabric)


@dataclass
class Workers:
    """The run's lock, its ports as the workers call them, and the workers' bookkeeping."""

    lock: RunLock
    adapters: Adapters
    threads: dict[int, threading.Thread] = field(default_factory=dict)
    idle: set[int] = field(default_factory=set)  # batches whose worker found nothing more to do
    errors: list[BaseException] = field(default_factory=list)


def workers_for(adapters: Adapters, fabric_tests: int) -> Workers:
    lock = RunLock()
    fabric = threading.Semaphore(max(1, fabric_tests))
    return Workers(lock, Adapters(_Provisioner(adapters.provisioner, lock), _Executor(adapters.executor, lock),
                                  _Pool(adapters.pool, lock, fabric), adapters.clock))  # type: ignore[arg-type]
