"""The rollout's ports: Provisioner, Executor, Clock (the Pool is `gpufleet.pool.protocol.Pool`).

Why ports: the orchestrator decides; adapters only carry. Each port has a real adapter
(Pulumi Automation API, ansible-runner, wall clock) and a simulated one (`gpufleet.sim`), and the
orchestrator cannot tell them apart. Every result carries `duration_s`: measured wall time on
real adapters, the modelled stage time on the simulator, so the rollout's timeline (and the
modelled time-to-pool with or without pipelining) is computed the same way for both. Why beside
the plan and not in rollout/: the adapters (configure/, sim/, the Pulumi provisioner) implement
them and the rollout drives them, so both sides import them from below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Literal, Mapping, Protocol, Sequence, runtime_checkable

from gpufleet.plan.model import NodeSlot

ReplaceAction = Literal["stop-and-report", "terminate"]
RemediateAction = Literal["reset-gpu", "reboot"]


@dataclass(frozen=True)
class Instance:
    """One instance standing in one slot (a replacement gets a new instance_id, same slot)."""

    slot: str
    instance_id: str
    batch: int
    block: int
    private_ip: str | None = None
    generation: int = 0  # its replacement-generation tag (gpufleet.tagging.GENERATION): replacements before it


@dataclass(frozen=True)
class ProvisionResult:
    instances: Mapping[str, Instance]  # slot -> instance, for every requested slot that came up
    shortfall: Mapping[str, str] = field(default_factory=dict)  # slot -> why it has no instance
    duration_s: float = 0.0


class HostStatus(str, Enum):
    OK = "ok"
    FAILED = "failed"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class HostOutcome:
    slot: str
    status: HostStatus
    task: str | None = None  # the failing task, when FAILED
    message: str | None = None
    duration_s: float = 0.0  # this host's time in the stage (measured, or modelled by the simulator)


@dataclass(frozen=True)
class StageResult:
    """Per-host outcomes of one stage over a set of nodes."""

    hosts: Mapping[str, HostOutcome]
    duration_s: float = 0.0

    def ok(self) -> list[str]:
        return sorted(s for s, h in self.hosts.items() if h.status is HostStatus.OK)

    def not_ok(self) -> list[HostOutcome]:
        return [h for s, h in sorted(self.hosts.items()) if h.status is not HostStatus.OK]


@runtime_checkable
class Provisioner(Protocol):
    """Brings slots to instances. Idempotent: a slot that already has an instance is returned as is."""

    def provision(self, batch: int, slots: Sequence[NodeSlot]) -> ProvisionResult:
        """Make batches 1..`batch` exist (the stack's batch target); return the instances of `slots`."""
        ...

    def replace(self, slot: NodeSlot, action: ReplaceAction) -> Instance:
        """Move the slot to a new instance (stop-and-report or terminate the old one first)."""
        ...

    def inventory(self) -> Mapping[str, Instance]:
        """Every slot that has an instance now."""
        ...


@runtime_checkable
class BaseProvisioner(Protocol):
    """A Provisioner that can build the stack's base alone: network, file system, controller and the
    storage base check's clients, no GPU node (the Pulumi stack at batch target 0). Optional: the
    simulator models the storage check on planned slots and static hosts have no clients, so the
    acceptance hooks ask for it only where it is there (`gpufleet.rollout.acceptance.AcceptanceHooks`)."""

    def provision_base(self) -> Mapping[str, Instance]:
        """Make the base exist (never lowering a batch target); return its storage clients by name."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Runs the playbooks on nodes and brings back raw outputs (never decides)."""

    def configure(self, instances: Sequence[Instance]) -> StageResult:
        """site.yml with the stack's BOM (and image pre-pull)."""
        ...

    def preflight(self, instances: Sequence[Instance], dest: Path) -> StageResult:
        """preflight.yml: one raw-output bundle per reachable node under dest/<slot>/."""
        ...

    def remediate(self, instance: Instance, action: RemediateAction) -> HostOutcome:
        """A GPU reset or a reboot before the one retest a REMEDIATE verdict allows."""
        ...


class Clock(Protocol):
    def now(self) -> datetime: ...


class WallClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)
