"""The Pool port on Slurm: `scontrol update` writes, `scontrol show node` / `sinfo --json` reads.

Each call reads the slot from Slurm, asks `gpufleet.pool.transitions` for the next state (which
raises before anything is written), then writes it with ONE `scontrol update` (state, reason and
comment together), so a refused call changes nothing and a repeated call writes nothing. How the
state is spelled in Slurm is in `nodes.py`. Every command runs under `timeout` (`cli.py`): a
slurmctld that is down or slow is a `PoolError` after a bounded wait, never a hang.
"""

from __future__ import annotations

from dataclasses import replace
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from itertools import groupby
from typing import Sequence

from gpufleet.errors import PoolError
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.launch import LaunchSpec
from gpufleet.pool import transitions
from gpufleet.pool.protocol import (PENDING_REASON, Holder, LaunchResult, Launcher, NodeState, PendingNode, PoolNode,
                                 PoolState, record_summary)
from gpufleet.pool.slurm.cli import SlurmCli
from gpufleet.pool.slurm.conf import hostlist, parse_version
from gpufleet.pool.slurm.jobs import parse_squeue, squeue_argv
from gpufleet.pool.slurm.patrol_hold import SlurmPatrolHolds
from gpufleet.pool.slurm.nodes import (GATES_PARTITION, RELEASED_REASON, Comment, SlurmNode, parse_comment, parse_json, parse_text,
                                    pool_node, reason_for, released_failures)

JSON_SINCE = (21, 8)  # sinfo --json (openapi v0.0.37+)
SCONTROL_JSON_SINCE = (23, 2)  # scontrol show node --json; sinfo --json groups nodes differently from here


class SlurmPool:
    kind = "slurm"

    def __init__(self, cli: SlurmCli, *, version: str | None = None, failures_before_blacklist: int = 2,
                 launcher: Launcher | None = None, set_node_addresses: bool = True) -> None:
        """`launcher`: runs the gates' specs instead of srun (the simulated fleet behind local-slurm,
        whose nodes have no GPUs to run nccl-tests on). `set_node_addresses`: registration points
        the slot's NodeAddr at its instance's private IP (a replacement gets a new one); off for the
        local cluster, where every slurmd listens on 127.0.0.1 whatever the simulated IP."""
        self.cli = cli
        self._launcher = launcher
        self.set_node_addresses = set_node_addresses
        self.version = parse_version(version) if version else None
        self.failures_before_blacklist = failures_before_blacklist

    # --- reads ----------------------------------------------------------------------------

    def nodes(self) -> dict[str, SlurmNode]:
        """Every node Slurm knows, in one call (JSON where this Slurm has it)."""
        if self.version is not None and self.version >= SCONTROL_JSON_SINCE:
            return parse_json(self.cli.run(["scontrol", "show", "node", "--json"]))
        if self.version is not None and self.version >= JSON_SINCE:
            return parse_json(self.cli.run(["sinfo", "--json"]))  # ignores -n: read all, filter here
        return parse_text(self.cli.run(["scontrol", "-o", "show", "node"]))

    def node(self, slot: str) -> SlurmNode:
        try:
            out = self.cli.run(["scontrol", "-o", "show", "node", slot], node=slot)
        except PoolError as exc:
            if "not found" in str(exc):
                raise PoolError("no such node in Slurm (slurm.conf does not define it)", node=slot) from None
            raise
        found = parse_text(out).get(slot)
        if found is None:
            raise PoolError("no such node in Slurm (slurm.conf does not define it)", node=slot)
        return found

    def state(self) -> PoolState:
        nodes = {name: pool_node(n) for name, n in sorted(self.nodes().items())}
        return PoolState(nodes={k: v for k, v in nodes.items() if v is not None})

    def disagreements(self) -> dict[str, str]:
        """Slots where Slurm and gpufleet disagree, to report, never to fix (issue 22): a node Slurm
        schedules (neither drained nor down) that carries gpufleet's comment but no admission record
        digest, i.e. a drain gpufleet set (pending gates, quarantine) lifted outside gpufleet
        (`scontrol update state=resume`). gpufleet reads such a node as pending; Slurm runs jobs there."""
        out: dict[str, str] = {}
        for name, n in sorted(self.nodes().items()):
            c = parse_comment(n.comment)
            if c is not None and c.digest is None and not (n.drained or n.down):
                out[name] = (f"Slurm schedules work on it ({'running a job' if n.busy else 'idle'}, not drained) "
                             "but gpufleet holds no admission record for it: a drain gpufleet set was lifted "
                             "outside gpufleet; `gpufleet pool readmit` takes it through the gate")
        return out

    def holders(self, slots: Sequence[str]) -> list[Holder]:
        """The jobs running (or completing) on `slots`, one Holder per job and slot, from ONE squeue.

        Read only: a Slurm drain waits for its jobs by design, so nothing here ends one."""
        if not slots:
            return []
        asked = set(slots)
        named = slots[0] if len(asked) == 1 else None
        jobs = parse_squeue(self.cli.run(squeue_argv(hostlist(sorted(asked))), node=named))
        return [Holder(slot=node, workload=job.workload()) for job in jobs for node in job.nodes if node in asked]

    # --- the port -------------------------------------------------------------------------

    def register_pending(self, nodes: Sequence[PendingNode]) -> None:
        known = self.nodes()
        partitions = {p for n in known.values() for p in n.partitions}
        writes: list[tuple[str, tuple[str, ...]]] = []
        for node in nodes:  # validate every node before writing any
            s = known.get(node.slot)
            if s is None:
                raise PoolError("no such node in Slurm (slurm.conf does not define it)", node=node.slot)
            if node.partition is not None and node.partition not in s.partitions:
                where = (f"the node is in {', '.join(s.partitions) or 'no partition'}" if node.partition in partitions
                         else f"partition {node.partition!r} is not in this pool (it has {', '.join(sorted(partitions))})")
                raise PoolError(f"cannot register in partition {node.partition!r}: {where}", node=node.slot)
            if s.block is not None and s.block != node.block:
                raise PoolError(f"the plan puts it in block {node.block}, Slurm's topology in block {s.block}",
                                node=node.slot)
            now = pool_node(s)
            new = _stored(transitions.register(now, node, released_failures(s) or 0))
            address = (f"NodeAddr={node.address}",) if self.set_node_addresses and node.address else ()
            if now != new or s.reason != PENDING_REASON or address:
                writes.append((node.slot, self._update_args(s, new) + address))
        # one scontrol call per distinct change (most nodes of a batch share it)
        for args, group in groupby(sorted(writes, key=lambda w: w[1]), key=lambda w: w[1]):
            names = [slot for slot, _ in group]
            self.cli.run(["scontrol", "update", f"NodeName={hostlist(names)}", *args], node=names[0])

    def admit(self, slot: str, record: AdmissionRecord) -> PoolNode:
        s = self.node(slot)
        now = pool_node(s)
        new = _stored(transitions.admit(now, slot, record))
        if new != now or s.drained:
            self._write(s, new, summary=record_summary(record))
        return new

    def admit_many(self, items: Sequence[tuple[str, AdmissionRecord]]) -> list[PoolNode]:
        """`admit` for many slots with one read and one scontrol process (its commands on stdin).

        Why: comments differ per node, so updates cannot share a command line; a process per
        node costs more than the update itself. All are validated before any is written.
        """
        known = self.nodes()
        results: list[PoolNode] = []
        lines: list[str] = []
        for slot, record in items:
            s = known.get(slot)
            if s is None:
                raise PoolError("no such node in Slurm (slurm.conf does not define it)", node=slot)
            now = pool_node(s)
            new = _stored(transitions.admit(now, slot, record))
            results.append(new)
            if new != now or s.drained:
                args = self._update_args(s, new, summary=record_summary(record))
                lines.append(" ".join(["update", f"NodeName={slot}", *(_stdin_arg(a) for a in args)]))
        if lines:
            try:
                self.cli.run(["scontrol"], stdin="\n".join(lines) + "\n")
            except PoolError:
                # scontrol's stdin mode reports a failure without naming the node: read back what
                # applied and admit the rest one by one, which names the node if it fails again
                after = self.nodes()
                for (slot, record), wanted in zip(items, results):
                    if pool_node(after[slot]) != wanted:
                        self.admit(slot, record)
        return results

    def quarantine(self, slot: str, reason_code: str, reason: str) -> PoolNode:
        s = self.node(slot)
        now = pool_node(s)
        new = _stored(transitions.quarantine(now, slot, reason_code, reason, self.failures_before_blacklist))
        if new != now:
            self._write(s, new)
        return new

    def blacklist(self, slot: str, reason: str) -> PoolNode:
        s = self.node(slot)
        now = pool_node(s)
        if now is None and released_failures(s) is not None:  # a released slot can still be blacklisted
            now = PoolNode(slot=slot, state=NodeState.PENDING, block=s.block,
                           partition=s.partitions[0] if s.partitions else None, failures=released_failures(s) or 0)
        new = _stored(transitions.blacklist(now, slot, reason))
        if new != pool_node(s):
            self._write(s, new)
        return new

    def clear(self, slot: str) -> PoolNode:
        s = self.node(slot)
        carried = released_failures(s)
        if carried is not None:  # no instance in the slot: forget its failures only
            if carried:
                self.cli.run(["scontrol", "update", f"NodeName={slot}", f"Comment={Comment(0).render()}"], node=slot)
            return PoolNode(slot=slot, state=NodeState.PENDING, block=s.block, failures=0)
        now = pool_node(s)
        new = _stored(transitions.clear(now, slot))
        if new != now:
            self._write(s, new)
        return new

    def release(self, slot: str) -> None:
        s = self.node(slot)
        if released_failures(s) is not None:
            return
        now = pool_node(s)
        new = transitions.release(now, slot)
        if new is None:
            self.cli.run(["scontrol", "update", f"NodeName={slot}", "State=DRAIN", f"Reason={RELEASED_REASON}",
                          f"Comment={Comment(now.failures).render()}"], node=slot)  # type: ignore[union-attr]
        elif new != now:
            self._write(s, new)

    def launcher(self) -> Launcher:
        return self._launcher if self._launcher is not None else SlurmLauncher(self.cli)

    def patrol_holds(self) -> SlurmPatrolHolds | None:
        """The patrol's lowest-priority holds, where slurmdbd has the patrol's QOS (accounting), else None."""
        holds = SlurmPatrolHolds(self.cli)
        return holds if holds.available() else None

    # --- writes ---------------------------------------------------------------------------

    def _update_args(self, s: SlurmNode, new: PoolNode, summary: str | None = None) -> tuple[str, ...]:
        old = parse_comment(s.comment)
        if new.state is NodeState.ADMITTED:
            keep = summary if summary is not None else (old.summary if old and old.digest == new.record_digest else "")
            comment = Comment(new.failures, new.record_digest, transitions.short(keep))
            state = ("State=RESUME",) if (s.drained or s.down) else ()
            return (*state, f"Comment={comment.render()}")
        reason = reason_for(new)
        return ("State=DRAIN", f"Reason={reason}", f"Comment={Comment(new.failures).render()}")

    def _write(self, s: SlurmNode, new: PoolNode, summary: str | None = None) -> None:
        try:
            self.cli.run(["scontrol", "update", f"NodeName={s.name}", *self._update_args(s, new, summary)], node=s.name)
        except PoolError as exc:
            # a refused state change ("Invalid node state specified") may only mean the node got
            # there already (a concurrent RESUME, a repeated call): what counts is what Slurm holds now
            if "did not answer" in str(exc) or pool_node(self.node(s.name)) != new:
                raise


def _stored(node: PoolNode) -> PoolNode:
    """What Slurm keeps of a node: no instance id (the journal and the admission record have it)."""
    return replace(node, instance_id=None)


def _stdin_arg(arg: str) -> str:
    """key=value for scontrol's own line parser: values with blanks in double quotes."""
    key, _, value = arg.partition("=")
    return f'{key}="{value}"' if re.search(r"\s", value) else arg


class SlurmLauncher:
    """Runs launch specs with srun, in parallel, on nodes that are still pending (drained).

    Slurm runs nothing on a drained node, so for each spec the launcher takes the nodes into a
    maintenance reservation first (no other job can land there), resumes them for the run, and
    drains them back to "pending gates" afterwards, whatever happened. A crash in between leaves
    them reserved until the reservation's end and read as pending by the adapter.
    """

    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli
        self._gates_partition: bool | None = None

    def gates_partition(self) -> str | None:
        """gpufleet's hidden all-nodes partition when slurm.conf has it: a node set that spans the
        plan's partitions (a pair across blocks, the smoke job) is one job only there. A
        configuration from before it runs the job in the default partition, as it always did."""
        if self._gates_partition is None:
            try:
                shown = self.cli.run(["scontrol", "-o", "show", "partition", GATES_PARTITION])
                self._gates_partition = f"PartitionName={GATES_PARTITION}" in shown
            except PoolError as exc:
                if "not found" not in str(exc).lower():
                    raise
                self._gates_partition = False
        return GATES_PARTITION if self._gates_partition else None

    def run(self, specs: Sequence[LaunchSpec], timeout_s: float) -> list[LaunchResult]:
        for spec in specs:
            if spec.kind != "slurm" or "srun" not in spec.argv:
                raise PoolError(f"launch spec {spec.name!r} is not an srun command line (kind {spec.kind!r})")
        if not specs:
            return []
        with ThreadPoolExecutor(max_workers=min(len(specs), 16)) as pool:
            return list(pool.map(lambda s: self._run_one(s, timeout_s), specs))

    def _run_one(self, spec: LaunchSpec, timeout_s: float) -> LaunchResult:
        reservation = re.sub(r"[^A-Za-z0-9_-]", "-", f"gpufleet-{spec.name}")[:60]
        names = hostlist(list(spec.nodes))
        minutes = max(2, int(timeout_s // 60) + 2)
        drained = [n for n in spec.nodes if self._is_pending(n)]
        self.cli.run(["scontrol", "create", "reservation", f"ReservationName={reservation}", f"Nodes={names}",
                      "StartTime=now", f"Duration={minutes}", f"Users={self.cli.transport.user}", "Flags=MAINT,IGNORE_JOBS"])
        started = datetime.now(timezone.utc)
        try:
            if drained:
                self.cli.run(["scontrol", "update", f"NodeName={hostlist(drained)}", "State=RESUME"])
            argv = list(spec.argv)
            at = argv.index("srun") + 1
            argv[at:at] = [f"--reservation={reservation}"] + (
                [f"--partition={part}"] if (part := self.gates_partition()) else [])
            code, output = self.cli.launch(argv, timeout_s)  # where slurmctld is: this machine, SSH or SSM
        finally:
            if drained:
                self.cli.run(["scontrol", "update", f"NodeName={hostlist(drained)}", "State=DRAIN",
                              f"Reason={PENDING_REASON}"])
            self.cli.run(["scontrol", "delete", f"ReservationName={reservation}"])
        return LaunchResult(name=spec.name, nodes=spec.nodes, exit_code=code, output=output, started=started,
                            ended=datetime.now(timezone.utc), command=spec.command_line)

    def _is_pending(self, slot: str) -> bool:
        out = self.cli.run(["scontrol", "-o", "show", "node", slot], node=slot)
        n = parse_text(out).get(slot)
        if n is None:
            raise PoolError("no such node in Slurm (slurm.conf does not define it)", node=slot)
        return n.drained and n.reason == PENDING_REASON

