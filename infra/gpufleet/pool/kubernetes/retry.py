"""Retrying API calls: back off with full jitter until a deadline, and say why it gave up.

Why here and not in the client: the kubernetes client retries connection errors itself but not
429 or 5xx answers, and never within a deadline. An API server under 1,250 node patches answers
429 (API Priority and Fairness) and, while it restarts, 5xx or nothing; each call retries
alone, waiting as the server asks (Retry-After) or min(cap, base * 2^n) times a random fraction,
so callers spread out instead of retrying in step. A 409 is not retried here: the caller must
read the object again and decide again (`Conflict`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from gpufleet.errors import PoolError

T = TypeVar("T")
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class Conflict(Exception):
    """The object changed since it was read (HTTP 409): read it again and recompute."""


@dataclass(frozen=True)
class Answer:
    """What one failed call told us: an HTTP status (0: no answer at all) and a Retry-After."""

    status: int
    detail: str
    retry_after_s: float | None = None


@dataclass
class RetryPolicy:
    """`deadline_s` bounds one call with all its retries; `sleep`, `clock` and `rng` are injectable."""

    deadline_s: float = 60.0
    base_s: float = 0.2
    cap_s: float = 10.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int, answer: Answer) -> float:
        if answer.retry_after_s is not None:
            return min(self.cap_s, max(0.0, answer.retry_after_s))
        return self.rng.uniform(0, min(self.cap_s, self.base_s * 2 ** attempt))

    def call(self, fn: Callable[[], T], classify: Callable[[Exception], Answer | None], what: str,
             node: str | None = None) -> T:
        """Run `fn`; retry while `classify` says the failure is transient and time is left.

        `classify` maps an exception to an `Answer` (or None: not an API failure, re-raised);
        409 raises `Conflict`; other statuses become a `PoolError` at once.
        """
        start = self.clock()
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 (classified just below)
                answer = classify(exc)
                if answer is None:
                    raise
            if answer.status == 409:
                raise Conflict(answer.detail)
            if answer.status != 0 and answer.status not in RETRYABLE:
                raise PoolError(f"{what}: the API server answered {answer.status} ({answer.detail})", node=node)
            wait = self.delay(attempt, answer)
            attempt += 1
            if self.clock() - start + wait > self.deadline_s:
                cause = f"HTTP {answer.status}" if answer.status else "no answer"
                raise PoolError(f"{what}: the API server is unavailable ({cause}: {answer.detail}) after "
                                f"{attempt} attempt(s) in {self.deadline_s:g} s", node=node)
            self.sleep(wait)
