"""The one exception hierarchy of gpufleet.

Library code raises these; only `gpufleet.cli` catches them and maps each class to
an exit code (DESIGN.md section 8), so every command reports failures the same way.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """Base of every error gpufleet raises on purpose. Exit code 1."""

    exit_code = 1


class ConfigError(GpufleetError):
    """Invalid stack file, schema violation or an ERROR finding. Exit code 2.

    `path` is the file, `line` the line in it (when known), `field` the dotted field path,
    `expected` what would be valid.
    """

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None,
                 expected: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.expected = expected
        self.message = message
        super().__init__(self.render())

    def render(self) -> str:
        at = f"{self.path}:{self.line}" if self.path and self.line else self.path
        where = ": ".join(p for p in (at, self.field) if p)
        text = f"{where}: {self.message}" if where else self.message
        if self.expected:
            text += f" (expected {self.expected})"
        return text


class ConfigErrors(ConfigError):
    """Several schema errors of one file, reported together."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.message, path=first.path, field=first.field, expected=first.expected, line=first.line)

    def render(self) -> str:
        return "\n".join(e.render() for e in getattr(self, "errors", [])) or super().render()


class UsageError(ConfigError):
    """Wrong command-line use. Exit code 2."""


class GateFailed(GpufleetError):
    """A gate said no: quarantined nodes, a halted rollout, a mandatory policy violation. Exit 3."""

    exit_code = 3


class DriftDetected(GpufleetError):
    """Drift or audit found a difference. Exit code 4."""

    exit_code = 4


class ExternalCommandFailed(GpufleetError):
    """An external tool or API call failed (pulumi, ansible, boto3). Exit code 1."""

    def __init__(self, what: str, detail: str) -> None:
        self.what = what
        self.detail = detail
        super().__init__(f"{what} failed: {detail}")


class LockHeld(GpufleetError):
    """Another live rollout of the same stack holds the lock. Exit code 1."""


class PoolError(GpufleetError):
    """The scheduling pool refused or could not do an operation (unknown node, mismatching record,
    API server or slurmctld down). Names the node and the cause. Exit code 1."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        self.node = node
        super().__init__(f"{node}: {message}" if node else message)


class ProvisioningError(GpufleetError):
    """Instances could not be created (capacity, quota, a concurrent update). Exit code 1.

    `retryable` says whether the same call may succeed later (throttling, a concurrent update)."""

    def __init__(self, message: str, *, retryable: bool = False, slots: tuple[str, ...] = ()) -> None:
        self.retryable = retryable
        self.slots = slots
        super().__init__(message)
