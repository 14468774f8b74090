"""Running Slurm's commands: always under `timeout`, always with the pool's own SLURM_CONF.

Why bounded: a Slurm client that cannot reach slurmctld retries for up to a minute, and one
whose config is missing retries too; a rollout of 1,250 nodes must get a `PoolError` naming the
cause after a few seconds instead. Why an explicit SLURM_CONF: the local test cluster must never
read or touch the machine's /etc/slurm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from infra.errors import PoolError

INSTALL_HINT = ("install Slurm's Debian/Ubuntu packages: `apt-get install slurm-wlm` "
                "(never slurm-wlm-emulator: it replaces slurmctld and slurmd with builds that cannot run)")


@dataclass
class SlurmCli:
    """`conf`: the slurm.conf every command reads (None: the system's, as on a real cluster)."""

    conf: Path | None = None
    timeout_s: float = 10.0
    calls: int = field(default=0, compare=False)  # commands run, for the benchmark

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, argv: Sequence[str], *, node: str | None = None, timeout_s: float | None = None,
            env: Mapping[str, str] | None = None, stdin: str | None = None) -> str:
        """stdout of the command; a PoolError (naming `node`) when it fails, is missing or hangs."""
        limit = timeout_s if timeout_s is not None else self.timeout_s
        tool = argv[0]
        if shutil.which(tool) is None:
            raise PoolError(f"{tool} is not on PATH; {INSTALL_HINT}", node=node)
        self.calls += 1
        full = ["timeout", "-k", "2", f"{limit:g}", *argv]
        try:
            proc = subprocess.run(full, capture_output=True, text=True, env=dict(env) if env is not None else self.env(),
                                  input=stdin, timeout=limit + 5)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode in (124, 137):
            raise PoolError(f"slurmctld did not answer `{' '.join(argv[:3])} ...` within {limit:g} s "
                            "(is the controller down or overloaded?)", node=node)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            detail = "; ".join(errors[-3:]) or proc.stdout.strip()[-300:] or f"exit {proc.returncode}"
            raise PoolError(f"`{' '.join(argv[:3])} ...` failed: {detail}", node=node)
        return proc.stdout
