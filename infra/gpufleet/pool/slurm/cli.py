"""Running Slurm's commands: always bounded, always with the pool's own SLURM_CONF, wherever they run.

Why bounded: a Slurm client that cannot reach slurmctld retries for up to a minute, and one
whose config is missing retries too; a rollout of 1,250 nodes must get a `PoolError` naming the
cause after a few seconds instead. Why an explicit SLURM_CONF: the local test cluster must never
read or touch the machine's /etc/slurm. Where the commands run is the transport's business
(`transport.py`: this machine, SSH or SSM to a real stack's controller); what a failure means
(the controller unreachable, slow, the command refused, Slurm not installed) is decided here, once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, NoReturn, Sequence

from gpufleet.errors import PoolError
from gpufleet.pool.slurm.transport import NOT_FOUND, Completed, LocalTransport, Status, Transport

INSTALL_HINT = ("install Slurm's Debian/Ubuntu packages: `apt-get install slurm-wlm` "
                "(never slurm-wlm-emulator: it replaces slurmctld and slurmd with builds that cannot run)")


@dataclass
class SlurmCli:
    """`conf`: the slurm.conf every command reads, a path on the machine the transport runs them on
    (None: that machine's own, as on a real cluster)."""

    conf: Path | None = None
    timeout_s: float = 10.0
    transport: Transport = field(default_factory=LocalTransport)
    calls: int = field(default=0, compare=False)  # commands run, for the benchmark

    def conf_env(self) -> dict[str, str]:
        """What gpufleet sets for every command, on top of the environment where it runs."""
        return {"SLURM_CONF": str(self.conf)} if self.conf is not None else {}

    def env(self) -> dict[str, str]:
        """This machine's environment for a Slurm process started here (the local cluster's daemons)."""
        return {**os.environ, **self.conf_env()}

    def run(self, argv: Sequence[str], *, node: str | None = None, timeout_s: float | None = None,
            env: Mapping[str, str] | None = None, stdin: str | None = None) -> str:
        """stdout of the command; a PoolError (naming `node`) when it fails, is missing or hangs.

        `env`: extra variables for this command. A big `stdin` that the transport cannot carry in
        one piece (SSM) is sent in several runs split at line ends: scontrol reads one command a line.
        """
        limit = timeout_s if timeout_s is not None else self.timeout_s
        variables = {**self.conf_env(), **(env or {})}
        chunks = _chunks(stdin, self.transport.max_stdin_chars) if stdin is not None else [None]
        out = []
        for chunk in chunks:
            self.calls += 1
            done = self.transport.execute(argv, env=variables, stdin=chunk, timeout_s=limit)
            out.append(self._stdout(argv, done, limit, node))
        return "".join(out)

    def launch(self, argv: Sequence[str], timeout_s: float) -> tuple[int, str]:
        """(exit code, stdout and stderr interleaved) of a job step such as srun; 124 when it ran past
        `timeout_s`. Only a controller that cannot be reached, or a missing tool, is an error."""
        self.calls += 1
        done = self.transport.execute(argv, env=self.conf_env(), stdin=None, timeout_s=timeout_s, merge_stderr=True)
        if done.status is Status.TIMED_OUT:
            return 124, done.stdout
        if done.status is Status.DONE and not _missing(argv[0], done):
            return int(done.exit_code or 0), done.stdout
        self._fail(argv, done, timeout_s, None)

    def _stdout(self, argv: Sequence[str], done: Completed, limit: float, node: str | None) -> str:
        if done.status is Status.DONE and done.exit_code == 0:
            return done.stdout
        self._fail(argv, done, limit, node)

    def _fail(self, argv: Sequence[str], done: Completed, limit: float, node: str | None) -> NoReturn:
        shown = f"`{' '.join(argv[:3])} ...`"
        where = self.transport.where
        if done.status is Status.UNREACHABLE:
            raise PoolError(f"cannot reach the Slurm controller ({where}) to run {shown}: {done.detail}", node=node)
        if done.status is Status.TIMED_OUT:
            extra = f"; {done.detail}" if done.detail else ""
            raise PoolError(f"slurmctld did not answer {shown} within {limit:g} s on {where} "
                            f"(is the controller down or overloaded?){extra}", node=node)
        if done.status is Status.INCOMPLETE:
            raise PoolError(f"{shown} on {where}: {done.detail}", node=node)
        if _missing(argv[0], done):
            raise PoolError(f"{argv[0]} is not on PATH on {where}; {INSTALL_HINT}", node=node)
        errors = [ln for ln in done.stderr.splitlines() if ln.strip()]
        detail = "; ".join(errors[-3:]) or done.stdout.strip()[-300:] or f"exit {done.exit_code}"
        raise PoolError(f"{shown} failed: {detail}", node=node)


def _missing(tool: str, done: Completed) -> bool:
    """Exit 127 from the shell or `timeout` that could not start `tool` (not from a job's own task)."""
    text = done.stdout + done.stderr
    return (done.status is Status.DONE and done.exit_code == NOT_FOUND and tool in text
            and ("command not found" in text or "failed to run command" in text))


def _chunks(text: str, limit: int | None) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut only after a newline (one piece if it fits)."""
    if limit is None or len(text) <= limit:
        return [text]
    pieces: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        if len(line) > limit:
            raise PoolError(f"one line of Slurm input is {len(line):,} characters, more than the "
                            f"{limit:,} this transport can carry")
        if len(current) + len(line) > limit:
            pieces.append(current)
            current = ""
        current += line
    return [*pieces, current] if current else pieces
