"""What one rollout run is handed: the adapters behind its ports, and its options.

Why a module of its own: the orchestrator's loop, the stages of a batch and day two (which gates
nodes through the same ports) all take these; kept apart, none of them imports the others for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.pool.protocol import Pool
from gpufleet.ports import Clock, Executor, Provisioner
from gpufleet.rollout.timeline import Window


@dataclass
class Adapters:
    provisioner: Provisioner
    executor: Executor
    pool: Pool
    clock: Clock


@dataclass(frozen=True)
class Options:
    until_batch: int | None = None
    pipelining: bool = True
    threaded: bool = False  # real adapters: port calls in worker threads (provision ahead, the window's batches)
    capacity_retries: int = 2  # extra provision requests for slots the provider could not fill
    launch_timeout_s: float = 1800.0
    replace_action: str = "stop-and-report"
    max_failure_rate: float = 0.1
    canary_max_failure_rate: float | None = None
    message_bytes: int = 16 * 2**30
    # post-canary batches in flight together (gpufleet.plan.window); None: one batch at a time
    window: Window | None = None
    drain_timeout_s: float = 3600.0  # a shrink waits this long for its released slots' jobs (upgrade.drainTimeoutS)
    drain_poll_s: float = 5.0
