"""The rehearsal hosts' multi-node `all_reduce_perf`: what the simulator's fabric model prints.

A rehearsal host has no GPUs, so its nccl-tests binary (a stub, installed by test_rehearsal.py)
hands a multi-node run to this script: `python nccl_stub.py FABRIC_JSON ARGS...`, run by every
node's first task of an `srun` step that slurmd started inside that host's network namespace.
It renders the run with `gpufleet.sim.fabric.render_run` (healthy nodes, no bad link) for the step's
nodes in rank order, and prints only its own rank's lines without srun's label: srun -l adds
the label back, so the gates parse exactly the text the simulator's launcher would have given.
Each invocation also appends its host name and step to `<the host's /opt>/nccl-tests/steps.log`,
the test's proof that the step ran on that host.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from gpufleet import catalog
from gpufleet.sim.fabric import DEFAULT_BYTES, group_busbw, render_run
from gpufleet.sim.render import NodeIdentity

STEPS_LOG = "/opt/nccl-tests/steps.log"


def sizes(argv: list[str]) -> list[int]:
    """all_reduce_perf's -b/-e/-f sweep."""
    def opt(flag: str, default: int) -> int:
        return int(argv[argv.index(flag) + 1]) if flag in argv else default

    low, high, factor = opt("-b", DEFAULT_BYTES), opt("-e", DEFAULT_BYTES), max(2, opt("-f", 2))
    out = [low]
    while out[-1] * factor <= high:
        out.append(out[-1] * factor)
    return out


def step_nodes() -> list[str]:
    """The step's nodes in rank order (srun's block distribution: node by node)."""
    out = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_STEP_NODELIST"]], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    return out.split()


def main(fabric_json: str, argv: list[str]) -> int:
    fabric = json.loads(Path(fabric_json).read_text(encoding="utf-8"))
    sku = catalog.get(fabric["instance_type"])
    rank = int(os.environ["SLURM_PROCID"])
    nodes = step_nodes()
    with open(STEPS_LOG, "a", encoding="utf-8") as log:
        log.write(f"{socket.gethostname()} rank {rank} step {os.environ.get('SLURM_JOB_ID')}."
                  f"{os.environ.get('SLURM_STEP_ID')} nodes {','.join(nodes)}\n")
    # the fields of gpufleet.sim.fleet.NodeProfile the fabric model reads (importing the simulator's
    # cloud costs seconds on every rank)
    profiles = [SimpleNamespace(who=NodeIdentity(stack=fabric["stack"], **fabric["nodes"][n]), fault=None,
                                systemic="none", factor=1.0) for n in nodes]
    text = render_run("slurm", sku, profiles, fabric["versions"], sizes(argv),
                      lambda size: group_busbw(sku, profiles, set(), size))
    label = f"{rank}: "
    sys.stdout.write("".join(line[len(label):] + "\n" for line in text.splitlines() if line.startswith(label)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
