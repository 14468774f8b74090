"""`gpufleet pool -s STACK [--json]`: the pool by state, partition and block, with free whole units;
`pool up|down` for a simulated stack's local Slurm; `pool units` (how to submit whole units: sbatch options or Kueue Jobs); `pool clear|blacklist|replace SLOT --reason WHY`
(journaled day-two changes, `gpufleet.daytwo.lifecycle`).

The view (`summarize`) is pure: a PoolState and the plan in, a JSON-ready document out.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import click

from gpufleet.changeset_command import yes_option
from gpufleet.errors import UsageError
from gpufleet.plan.model import ClusterPlan
from gpufleet.pool.protocol import NodeState, PoolNode, PoolState

if TYPE_CHECKING:
    from gpufleet.changeset import ChangeSet

SCHEMA_VERSION = 2  # 2: an integer in the envelope (gpufleet.envelope); 1 was the string "1"
STATES = [s.value for s in NodeState]


def free_units(plan: ClusterPlan, state: PoolState) -> dict[str, int]:
    """Per partition, the units whose every node is admitted and idle: what a job can get now."""
    ready = {slot for slot, n in state.nodes.items() if n.state is NodeState.ADMITTED and not n.busy}
    out: dict[str, int] = {p.name: 0 for p in plan.partitions}
    for unit in plan.units:
        if unit.partition is not None and all(plan.slot(i).name in ready for i in unit.nodes):
            out[unit.partition] += 1
    return out


def summarize(plan: ClusterPlan, state: PoolState, stack: str, pool_kind: str) -> dict[str, Any]:
    nodes = list(state.nodes.values())
    by_partition: dict[str, Counter[str]] = {}
    by_block: dict[int, Counter[str]] = {}
    for n in nodes:
        by_partition.setdefault(n.partition or "-", Counter())[n.state.value] += 1
        if n.block is not None:
            by_block.setdefault(n.block, Counter())[n.state.value] += 1
    free = free_units(plan, state)
    units = {p.name: p.units for p in plan.partitions}

    def listing(s: NodeState) -> list[dict[str, Any]]:
        return [_node_doc(n) for n in sorted(state.by_state(s), key=lambda n: n.slot)]

    from gpufleet.envelope import envelope

    return envelope("pool", stack, {
        "pool": pool_kind,
        "planned_nodes": len(plan.nodes),
        "counts": {s: sum(1 for n in nodes if n.state.value == s) for s in STATES},
        "partitions": {name: {"units": units.get(name), "free_units": free.get(name, 0),
                              "nodes": {s: c[s] for s in STATES if c[s]}}
                       for name, c in sorted(by_partition.items())} | {
                          name: {"units": units[name], "free_units": 0, "nodes": {}}
                          for name in units if name not in by_partition},
        "blocks": {str(b): {s: c[s] for s in STATES if c[s]} for b, c in sorted(by_block.items())},
        "quarantined": listing(NodeState.QUARANTINED),
        "blacklisted": listing(NodeState.BLACKLISTED),
    }, schema_version=SCHEMA_VERSION)


def _node_doc(n: PoolNode) -> dict[str, Any]:
    return {"slot": n.slot, "block": n.block, "partition": n.partition, "reason_code": n.reason_code,
            "reason": n.reason, "failures": n.failures}


def render_text(doc: dict[str, Any]) -> str:
    c = doc["counts"]
    lines = [f"pool of stack {doc['stack']} ({doc['pool']}): {sum(c.values())} of {doc['planned_nodes']} planned nodes: "
             + ", ".join(f"{c[s]} {s}" for s in STATES)]
    lines.append(f"{'partition':<14}{'units':>7}{'free':>7}  nodes")
    for name, p in doc["partitions"].items():
        nodes = ", ".join(f"{v} {k}" for k, v in p["nodes"].items()) or "none"
        lines.append(f"{name:<14}{p['units'] if p['units'] is not None else '-':>7}{p['free_units']:>7}  {nodes}")
    if doc["blocks"]:
        lines.append("blocks: " + "; ".join(f"{span}: {text}" for span, text in _block_runs(doc["blocks"])))
    for key in ("quarantined", "blacklisted"):
        for n in doc[key]:
            lines.append(f"{key:<12} {n['slot']} (block {n['block']}, {n['failures']} failure(s)) "
                         f"{n['reason_code']}: {n['reason']}")
    return "\n".join(lines)


def _block_runs(blocks: dict[str, dict[str, int]]) -> list[tuple[str, str]]:
    """Consecutive blocks with the same counts in one entry ("0-23: 5 admitted"), so 250 blocks fit."""
    runs: list[tuple[int, int, str]] = []
    for b, counts in blocks.items():
        text = ", ".join(f"{v} {k}" for k, v in counts.items())
        if runs and runs[-1][1] == int(b) - 1 and runs[-1][2] == text:
            runs[-1] = (runs[-1][0], int(b), text)
        else:
            runs.append((int(b), int(b), text))
    return [(f"{a}" if a == z else f"{a}-{z}", text) for a, z, text in runs]


# --- the commands -----------------------------------------------------------------------------

def _stack_of(ctx: click.Context, stack: str | None) -> str:
    chosen = stack or (ctx.parent.params.get("stack") if ctx.parent else None)
    if not chosen:
        raise UsageError("which stack?", field="-s/--stack", expected="gpufleet pool -s STACK [up|down|clear|blacklist]")
    return chosen


def _context(stack: str):
    from gpufleet.project import current_project
    from gpufleet.spec import load_stack

    project = current_project()
    return project, load_stack(stack, project.stacks_dir)


def _standing_plan(spec, project, stack: str):
    """The plan of the cluster as it stands: a simulated stack's rollout journal may record another
    size than the stack file now asks for (grown or shrunk by whole blocks, or about to be); a real
    stack's layout is the program's, whose plan this is."""
    from gpufleet.plan import build_plan

    plan = build_plan(spec)
    if not spec.simulated:
        return plan
    from gpufleet.rollout.backends import open_backend
    from gpufleet.rollout.journal import Journal
    from gpufleet.rollout.lock import LockInfo
    from gpufleet.rollout.resize_plan import standing_plan

    store, _lock = open_backend(spec.rollout.state_backend, project.state_dir(stack), stack, LockInfo.mine(stack),
                                region=spec.cluster.region)
    return standing_plan(plan, Journal(store, stack).load(repair=False))


def _pool(stack: str):
    from gpufleet.errors import PoolError
    from gpufleet.lifecycle.destroyed import destroyed, no_cluster_text
    from gpufleet.pool.factory import pool_for

    project, spec = _context(stack)
    gone = destroyed(project.state_dir(stack))
    if gone is not None:  # not an empty pool: there is no cluster (gpufleet.lifecycle.destroyed)
        raise PoolError(no_cluster_text(stack, gone))
    plan = _standing_plan(spec, project, stack)
    return pool_for(spec, project, stack, plan=plan), plan


stack_opt = click.option("-s", "--stack", default=None, help="Stack name: Pulumi.<stack>.yaml")


@click.group(invoke_without_command=True)
@stack_opt
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document.")
@click.pass_context
def pool(ctx: click.Context, stack: str | None, as_json: bool) -> None:
    """The stack's scheduling pool: nodes by state, partition and block; free whole units.

    Subcommands: `up` / `down` start and stop a simulated stack's local Slurm; `clear SLOT`
    forgets a slot's failures (a blacklisted slot must pass its gates again); `blacklist SLOT`.
    """
    if ctx.invoked_subcommand is not None:
        return
    name = _stack_of(ctx, stack)
    the_pool, plan = _pool(name)
    doc = summarize(plan, the_pool.state(), name, the_pool.kind)
    from gpufleet.daytwo.breaker_command import breaker_summary  # the day-two circuit breaker's state
    doc["breaker"] = breaker_summary(name)
    click.echo(json.dumps(doc, indent=2) if as_json else render_text(doc) + f"\n{doc['breaker']['line']}")


def _local_slurm(stack: str):
    from gpufleet.pool.factory import local_slurm_root
    from gpufleet.pool.slurm.local import LocalSlurm

    project, spec = _context(stack)
    if not (spec.pool.type == "slurm" and spec.simulated):
        raise UsageError(f"stack {stack!r} has no local Slurm (pool.type {spec.pool.type}, "
                         f"{'simulated' if spec.simulated else 'real'})", field="-s/--stack",
                         expected="a simulated stack with pool.type slurm, e.g. local-slurm; a real cluster's "
                                  "Slurm is configured by the slurm role")
    return LocalSlurm(local_slurm_root(project, stack)), spec


@pool.command()
@stack_opt
@click.option("--clean", is_flag=True, help="Restart from scratch even when it is up (every node pending again).")
@click.pass_context
def up(ctx: click.Context, stack: str | None, clean: bool) -> None:
    """Start MariaDB, slurmdbd, slurmctld and one slurmd per planned node of a simulated stack.

    A cluster already up with every planned node keeps its state (admitted nodes stay admitted);
    otherwise, or with --clean, it starts clean: every node drained until gated.
    """
    name = _stack_of(ctx, stack)
    local, spec = _local_slurm(name)
    project = _context(name)[0]
    plan = _standing_plan(spec, project, name)  # a grown or shrunk cluster's nodes, not the stack file's next size
    if local.running() and not clean:
        problems = local.problems([n.name for n in plan.nodes])
        if not problems:
            click.echo(f"local Slurm of {name}: already up with {len(plan.nodes)} nodes (--clean restarts it)\n"
                       f"  export SLURM_CONF={local.conf_path}")
            return
        click.echo(f"local Slurm of {name} is unhealthy ({'; '.join(problems)}): restarting it clean", err=True)
    took = local.up(spec, plan, accounting=True)  # slurmdbd too: sacct, QOS limits, `gpufleet cost`
    from gpufleet.pool.slurm.mpi import choose_srun_mpi, pmix_library, pmix_loadable

    _, findings = choose_srun_mpi(spec.pool.srun_mpi, pmix_loadable(), pmix_library())
    for f in findings:  # srun --mpi of the gates on this Slurm
        _warn(f"{f.code} ({f.field}): {f.message}")
    click.echo(f"local Slurm of {name}: slurmdbd, slurmctld and {len(plan.nodes)} slurmd up in {took:.1f} s, every "
               f"node drained until gated\n  export SLURM_CONF={local.conf_path}   # then sinfo, squeue, srun, sacct")


@pool.command()
@stack_opt
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document.")
@click.pass_context
def units(ctx: click.Context, stack: str | None, as_json: bool) -> None:
    """How to submit whole units in the three seed modes (one job over all units, independent unit
    jobs, prefill/decode pools): on Slurm the sbatch options Slurm accepts, on Kubernetes the Jobs."""
    from gpufleet.plan import build_plan
    from gpufleet.pool.slurm.conf import topology_kind
    from gpufleet.pool.slurm.files import target_slurm_version
    from gpufleet.pool.slurm.units import render, submit_ways, team_lines

    name = _stack_of(ctx, stack)
    project, spec = _context(name)
    if spec.pool.type == "kubernetes":  # the Jobs to apply, one per seed mode and queue
        from gpufleet.pool.kubernetes.unit_jobs import render as render_jobs
        click.echo(render_jobs(spec, build_plan(spec)), nl=False)
        return
    if spec.pool.type != "slurm":
        raise UsageError(f"stack {name!r} has a {spec.pool.type} pool, not Slurm", field="-s/--stack",
                         expected="a stack with pool.type slurm or kubernetes")
    if spec.simulated:  # the local Slurm is the one installed here
        from gpufleet.pool.slurm.local import slurm_version
        version = slurm_version()
    else:
        version = target_slurm_version(spec, project)
    ways = submit_ways(spec, build_plan(spec), topology_kind(version))
    if as_json:
        click.echo(json.dumps({"stack": name, "slurm_version": version, "ways": [
            {"mode": w.mode, "partition": w.partition, "units": w.units, "sbatch": list(w.sbatch), "note": w.note}
            for w in ways]}, indent=2))
    else:
        click.echo(render(ways, name, team_lines(spec)))


@pool.group("access")
def access_group() -> None:
    """Slurm accounts and QOS of the stack (partition QOS, gpufleet:ops.tenants) in slurmdbd."""


@access_group.command("apply")
@stack_opt
@click.pass_context
def access_apply(ctx: click.Context, stack: str | None) -> None:
    """Create or fix, in slurmdbd, the cluster, each partition's QOS and the teams' accounts, QOS and
    users; only what is missing or different runs, so a second apply changes nothing."""
    import shlex

    from gpufleet.plan import build_plan
    from gpufleet.pool.slurm.access_apply import apply_access, desired_access

    name = _stack_of(ctx.parent or ctx, stack)  # -s here or on `pool`
    project, spec = _context(name)
    if spec.pool.type != "slurm":
        raise UsageError(f"stack {name!r} has a {spec.pool.type} pool, not Slurm", field="-s/--stack",
                         expected="a stack with pool.type slurm (`gpufleet ops access` writes Kubernetes access)")
    if spec.simulated:
        local, _ = _local_slurm(name)
        cli = local.cli(timeout_s=60)
    else:
        if not spec.ops.slurm_accounting:
            raise UsageError(f"stack {name!r} runs no slurmdbd", field="gpufleet:ops.slurmAccounting",
                             expected="true (the slurm_accounting role installs slurmdbd)")
        from gpufleet.pool.factory import real_slurm_cli
        cli = real_slurm_cli(spec, project, name)
    changes = apply_access(cli, desired_access(spec, build_plan(spec)))
    for argv in changes:
        click.echo(shlex.join(argv))
    click.echo(f"slurm access of {name}: {len(changes)} change(s)" if changes else
               f"slurm access of {name}: unchanged")


@pool.command()
@stack_opt
@click.pass_context
def down(ctx: click.Context, stack: str | None) -> None:
    """Stop a simulated stack's local Slurm."""
    name = _stack_of(ctx, stack)
    local, _ = _local_slurm(name)
    click.echo(f"local Slurm of {name}: stopped {local.down()} daemon(s)")


@pool.command()
@stack_opt
@click.argument("slot")
@click.option("--reason", required=True, help="Why (journaled with who asked).")
@click.pass_context
def clear(ctx: click.Context, stack: str | None, slot: str, reason: str) -> None:
    """Forget SLOT's failures, then take it through the re-admission gate (exit 3 when it fails there)."""
    from gpufleet.errors import GateFailed
    from gpufleet.ops.readmit import clear_then_readmit

    node, record, text, gated = clear_then_readmit(_stack_of(ctx, stack), slot, reason, warn=_warn)
    click.echo(f"{slot}: {text}")
    if gated and record is None:
        raise GateFailed(f"{slot}: failed the re-admission gate ({node.state.value})")


@pool.command()
@stack_opt
@click.argument("slot")
@click.option("--reason", required=True, help="Why (kept with the node: Slurm reason, k8s annotation).")
@click.option("--dry-run", is_flag=True, help="Print the change set; change nothing.")
@yes_option
@click.pass_context
def blacklist(ctx: click.Context, stack: str | None, slot: str, reason: str, dry_run: bool = False,
              yes: bool = False) -> None:
    """Blacklist SLOT: reported for replacement, never admitted again until `pool clear`."""
    from gpufleet.changeset_command import confirm_changes
    from gpufleet.daytwo import lifecycle
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.ops import audit

    name = _stack_of(ctx, stack)
    if not confirm_changes(slot_changes("pool blacklist", name, slot, reason, *_context(name)), yes=yes,
                           dry_run=dry_run):
        return
    with open_day_two(name, "pool blacklist", pool_only=True, warn=_warn) as d:
        node = lifecycle.blacklist(d, slot, reason)
        audit.day_two(d, "pool blacklist", reason, slot, state=node.state.value)
    click.echo(f"{slot}: {node.state.value} ({node.reason})")


@pool.command()
@stack_opt
@click.argument("slot")
@click.option("--reason", required=True, help="Why (journaled with who asked).")
@click.option("--force-unlock", is_flag=True, help="Take the stack's lock from a run on another host that is gone.")
@click.option("--dry-run", is_flag=True, help="Print the change set; change nothing.")
@yes_option
@click.pass_context
def replace(ctx: click.Context, stack: str | None, slot: str, reason: str, force_unlock: bool,
            dry_run: bool = False, yes: bool = False) -> None:
    """Move SLOT to a new instance, gate it fully (configure, preflight, gates, multi-node with
    admitted partners) and admit it; exit 3 when the new instance fails its gates."""
    from gpufleet.changeset_command import confirm_changes
    from gpufleet.daytwo import lifecycle
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.ops import audit
    from gpufleet.errors import GateFailed

    name = _stack_of(ctx, stack)
    if not confirm_changes(slot_changes("pool replace", name, slot, reason, *_context(name)), yes=yes,
                           dry_run=dry_run):
        return
    with open_day_two(name, "pool replace", force_unlock=force_unlock, warn=_warn) as d:
        node, record, text = lifecycle.replace(d, slot, reason)
        audit.day_two(d, "pool replace", reason, slot, state=node.state.value, outcome=text)
    click.echo(f"{slot}: {text}")
    if record is None:
        raise GateFailed(f"{slot}: the replacement instance failed its gates ({node.state.value})")


def slot_changes(command: str, stack: str, slot: str, reason: str, project: Any, spec: Any) -> "ChangeSet":
    """What `pool replace` or `pool blacklist` does to SLOT, from the stack alone (no provider or
    pool is opened before the person has confirmed). A slot the plan lacks is refused here."""
    from gpufleet.changeset import ChangeSetBuilder
    from gpufleet.changeset_command import hourly_price
    plan = _standing_plan(spec, project, stack)
    slots = {s.name: s for s in plan.nodes}
    if slot not in slots:
        raise UsageError(f"no slot {slot!r} in stack {stack}'s plan", field="SLOT",
                         expected=f"a slot name such as {plan.nodes[0].name}")
    usd, note = hourly_price(spec)
    b = ChangeSetBuilder(command, stack, simulated=spec.simulated, price_note=note)
    block = slots[slot].block
    part = next((blk.partition for blk in plan.blocks if blk.id == block), None) or "-"
    if command == "pool blacklist":
        b.add("drain", "pool-node", slot, f"block {block}, partition {part}: never admitted again until "
                                          f"`gpufleet pool clear {slot}`")
        b.note("its instance keeps running (and billing) until it is replaced: `gpufleet pool replace` buys the "
               "new one")
    else:
        action = spec.rollout.replace_action
        b.add("release", "pool-node", slot, f"block {block}, partition {part}: out of the pool while replaced")
        b.add("terminate" if action == "terminate" else "stop", "instance", slot,
              f"its current instance (rollout.replaceAction {action})", usd_per_hour=usd)
        b.add("launch", "instance", slot, "a new instance, configured and gated fully", usd_per_hour=usd)
        b.add("admit", "pool-node", slot, "once the new instance passes its gates")
        b.note("a replacement already journaled continues where it stopped")
    b.note(f"reason: {reason}")
    return b.build()


def _warn(message: str) -> None:
    click.echo(f"gpufleet: warning: {message}", err=True)
