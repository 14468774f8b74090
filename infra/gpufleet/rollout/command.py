"""`gpufleet rollout -s STACK [--resume] [--restart] [--retry-stage STAGE] [--until-batch N] [--dry-run]
[--force-unlock]`.

Exit codes (DESIGN.md section 8): 0 the target reached (with replacements), 1 an error or a lock
held by a live rollout, 2 bad configuration or an unfinished journal without --resume, 3 halted
or ended short of the target (spares exhausted, blacklisted slots).

A failed acceptance stage halts the rollout, and running again reproduces that halt (exit 3)
from the journal without collecting anything. Once the cause is fixed, `--retry-stage STAGE`
journals a retry: the halt is lifted, that stage runs again, and the rollout continues from
where it stood (nodes already admitted stay admitted). `--restart` would instead archive the
journal and start over.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpufleet.changeset_command import yes_option
from gpufleet.errors import GateFailed, UsageError

if TYPE_CHECKING:
    from gpufleet.changeset import ChangeSet
    from gpufleet.plan.model import ClusterPlan
    from gpufleet.plan.resize import Resize
    from gpufleet.project import Project
    from gpufleet.rollout.journal import Journal
    from gpufleet.rollout.state import RolloutState
    from gpufleet.spec import ClusterSpec


@click.command("rollout")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--resume", is_flag=True, help="Continue the stack's unfinished rollout from its journal.")
@click.option("--restart", is_flag=True, help="Archive the stack's journal and start a new rollout.")
@click.option("--retry-stage", type=click.Choice(["storage", "network", "smoke"]), default=None,
              help="Run this failed acceptance stage again (after fixing its cause) and continue the rollout.")
@click.option("--until-batch", type=click.IntRange(1), default=None, help="Stop after this batch (resume later).")
@click.option("--dry-run", is_flag=True,
              help="Print the change set, the batches and what the journal already decided; change nothing.")
@click.option("--force-unlock", is_flag=True,
              help="Take the stack's lock even when another host holds it (only once that rollout is gone).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the rollout report as JSON on stdout (the live view goes to stderr).")
@yes_option
def rollout(stack: str, resume: bool, restart: bool, retry_stage: str | None, until_batch: int | None,
            dry_run: bool, force_unlock: bool, as_json: bool = False, yes: bool = False) -> None:
    """Provision, configure, gate and admit the stack's nodes, batch by batch, canary first."""
    from gpufleet.findings import has_errors
    from gpufleet.plan import plan_stack
    from gpufleet.project import current_project
    from gpufleet.rollout.backends import open_backend
    from gpufleet.changeset_command import confirm_changes
    from gpufleet.rollout.journal import Journal
    from gpufleet.rollout.lock import LockInfo
    from gpufleet.rollout.state import RolloutState
    from gpufleet.spec import load_stack_path

    if resume and restart:
        raise UsageError("--resume and --restart exclude each other", field="--restart",
                         expected="--resume to continue the journal, or --restart to archive it and start again")
    if retry_stage and restart:
        raise UsageError("--retry-stage and --restart exclude each other", field="--retry-stage",
                         expected="--retry-stage to rerun a failed stage of this journal, or --restart to start over")
    resume = resume or retry_stage is not None  # a retry continues the journal it reopens
    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    plan = plan_stack(spec)
    errors = [f for f in plan.findings if f.level.value == "ERROR"]
    if has_errors(errors):
        raise UsageError("; ".join(f.render() for f in errors), path=str(project.stack_file(stack)))
    if until_batch is not None and until_batch > len(plan.batches):
        raise UsageError(f"--until-batch {until_batch}: the plan of {stack} has {len(plan.batches)} batch(es)",
                         field="--until-batch", expected=f"a batch number from 1 to {len(plan.batches)}")
    state_dir = project.state_dir(stack)

    def warn(message: str) -> None:
        click.echo(f"gpufleet: warning: {message}", err=True)

    store, lock = open_backend(spec.rollout.state_backend, state_dir, stack, LockInfo.mine(stack),
                               force=force_unlock, warn=warn, region=spec.cluster.region)
    if dry_run:
        journal = Journal(store, stack)
        state = journal.load(repair=False)
        resize = _resize(spec, plan, state, project, stack)  # grow or shrink by whole blocks (issue 23 item 1)
        plan = resize.plan
        _dry_run(plan, state, store.location, err=as_json)
        if restart:  # the change set of what the run would do: a restart runs everything again
            state = RolloutState()
        elif retry_stage is not None:
            state.halted = False  # this load only: the retry lifts the halt, and what is left runs again
        confirm_changes(_changes(spec, plan, state, stack, until_batch, resize), yes=yes, dry_run=True,
                        as_json=as_json)
        click.echo("dry run: nothing was provisioned, configured or changed", err=as_json)
        return
    # the change set, shown (and confirmed) before the lock is taken or anything is written
    # (a restart archives the journal, even a damaged one: everything runs again)
    before = RolloutState() if restart else Journal(store, stack).load(repair=False)
    if before.unfinished and not resume:
        _refuse_unfinished(stack, store.location)
    if retry_stage is not None:
        before.halted = False  # this load only: the retry lifts the halt, and what is left runs again
    resize = _resize(spec, plan, before, project, stack)  # grow or shrink by whole blocks (issue 23 item 1)
    plan = resize.plan
    confirm_changes(_changes(spec, plan, before, stack, until_batch, resize), yes=yes, as_json=as_json)
    with lock:
        if restart and store.exists():
            click.echo(f"gpufleet: archived the previous journal to {store.archive()}", err=True)
        if restart and spec.simulated:
            for moved in _archive_simulated_world(state_dir, spec.pool.type == "sim"):
                click.echo(f"gpufleet: archived the simulated world to {moved}: its seeded faults come back",
                           err=True)
        journal = Journal(store, stack)
        state = journal.load(repair=True)
        if state.unfinished and not resume:
            _refuse_unfinished(stack, store.location)
        if retry_stage is not None and not state.started:
            raise UsageError(f"{stack} has no rollout journal in {store.location}: no acceptance stage has run, "
                             "so there is nothing to retry", field="--retry-stage",
                             expected=f"`gpufleet rollout -s {stack}` to start the rollout")
        if resume and not state.started:
            click.echo(f"gpufleet: no journal for {stack} yet: starting a new rollout", err=True)
        if not state.started:  # a new cluster: a destroyed one's marker joins the destroy history
            from gpufleet.lifecycle.destroyed import retire

            retire(state_dir)
        try:
            _run(spec, plan, project, stack, journal, until_batch, state_dir, retry_stage, as_json, resize)
        finally:
            journal.close()


def _refuse_unfinished(stack: str, location: str) -> None:
    raise UsageError(f"{stack} has an unfinished rollout in {location}",
                     field="--resume", expected="--resume to continue it, or --restart to archive "
                                                "its journal and start again")


def _resize(spec: "ClusterSpec", plan: "ClusterPlan", state: "RolloutState", project: "Project",
            stack: str) -> "Resize":
    """The journal's layout against the plan now: unchanged, grown or shrunk by whole blocks
    (gpufleet.rollout.resize_plan); its plan is the one the run works on."""
    from gpufleet.rollout.resize_plan import resolve

    return resolve(spec, plan, state, project, stack)


def _changes(spec: "ClusterSpec", plan: "ClusterPlan", state: "RolloutState", stack: str,
             until_batch: int | None, resize: "Resize | None" = None) -> "ChangeSet":
    """The rollout's change set for the journal's state (gpufleet.rollout.changes), priced."""
    from gpufleet.changeset_command import hourly_price
    from gpufleet.rollout.changes import rollout_changes

    usd, note = hourly_price(spec)
    clients = (spec.acceptance.storage_clients, spec.acceptance.storage_client_type) if not spec.simulated else None
    changes = rollout_changes(plan, state, stack, until_batch=until_batch, simulated=spec.simulated,
                              usd_per_hour=usd, price_note=note, storage_clients=clients,
                              replace_action=spec.rollout.replace_action)
    if resize is None:
        return changes
    from gpufleet.rollout.resize_plan import with_resize

    return with_resize(changes, resize, usd, {s: n.instance_id for s, n in state.nodes.items() if n.instance_id})


def _archive_simulated_world(state_dir: Path, simulated_pool: bool) -> list[Path]:
    """A restart of a simulated stack starts from a fresh simulated cloud (and simulated pool):
    kept, its instances would still run with their faults already replaced, so the seeded faults
    a demo shows would be gone. Moved aside, not deleted, like the journal."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for name, archived in (("sim", f"sim.{stamp}"), *([("pool.json", f"pool.{stamp}.json")] if simulated_pool else [])):
        if (state_dir / name).exists():
            os.replace(state_dir / name, state_dir / archived)
            moved.append(state_dir / archived)
    return moved


def _run(spec: "ClusterSpec", plan: "ClusterPlan", project: "Project", stack: str, journal: "Journal",
         until_batch: int | None, state_dir: Path, retry_stage: str | None = None, as_json: bool = False,
         resize: "Resize | None" = None) -> None:
    from gpufleet.gates.admission import AdmissionRecord
    from gpufleet.ops import audit
    from gpufleet.reports import rollout as report
    from gpufleet.rollout.acceptance import stack_hooks
    from gpufleet.rollout.display import make_display
    from gpufleet.rollout.orchestrator import Orchestrator
    from gpufleet.rollout.wiring import gate_settings, options, wire

    from gpufleet import bom_record  # the BOM on record by digest before any node is configured with it
    from gpufleet.rollout.backends import bom_store_for
    bom_record.keep(state_dir, project.path(spec.image.bom), applied_by=f"rollout {stack}", image=spec.image.ami_id,
                    remote=bom_store_for(spec.rollout.state_backend, stack, spec.cluster.region))
    from gpufleet.rollout.resize_plan import sync_local_slurm

    leaving = {*journal.state.releasing, *(s.name for s in (resize.released if resize is not None else ()))}
    joined = sync_local_slurm(spec, project, stack, plan, leaving)
    if joined:  # a grow's new nodes exist in the local Slurm before its pool is wired
        click.echo(f"gpufleet: {joined}", err=True)
    wiring = wire(spec, plan, project, stack)  # journal events keep wall time; records the ports' clock
    # the acceptance stages over the wiring's collectors (adopts pre-journal outcomes)
    hooks = stack_hooks(spec, plan, state_dir, journal, wiring)
    if retry_stage is not None:
        _retry(journal, retry_stage, stack)
    opts = options(spec, until_batch, wiring.threaded, plan)
    orch = Orchestrator(plan, stack, wiring.adapters, journal, gate_settings(spec, project), state_dir, opts,
                        hooks=hooks, resize=resize)
    started = time.monotonic()
    modelled = wiring.simulator is not None
    clock = wiring.adapters.clock

    def elapsed() -> float:
        if modelled:
            return (clock.now() - clock.start).total_seconds()
        return time.monotonic() - started

    display = make_display(plan, elapsed, sys.stderr) if as_json else make_display(plan, elapsed)
    journal.listeners.append(display)
    if hooks is not None:
        hooks.note = display.note
    if wiring.engine is not None:  # a Pulumi stack: the engine's steps of each `up`, as they happen
        wiring.engine.to(display.engine)
    try:
        outcome = orch.run()
    finally:
        display.close()
    wall = time.monotonic() - started
    left = sync_local_slurm(spec, project, stack, plan, outcome.state.releasing)
    if left:  # a finished shrink's nodes leave the local Slurm
        click.echo(f"gpufleet: {left}", err=True)
    records = _write_records(state_dir, outcome.state)
    rep = report.build(plan, outcome.state, stack, opts.pipelining, outcome.short if outcome.finished else [],
                       wall_seconds=round(wall, 2), window=opts.window)
    paths = report.write(rep, [AdmissionRecord.model_validate(r) for r in records], project.reports_dir(stack))
    audit.record(state_dir, stack, "rollout", outcome.halt_reason or f"until batch {until_batch or 'all'}",
                 simulated=spec.simulated, details={"admitted": len(records), "halted": outcome.halted,
                                                    "short": list(outcome.short)})
    if as_json:  # the report document (the envelope: schema_version, kind, stack, generated_at) alone on stdout
        click.echo(rep.model_dump_json(indent=2))
    else:
        click.echo(_summary(rep, modelled))
    click.echo(f"reports: {', '.join(str(p) for p in paths)}", err=as_json)
    _start_job_stream(spec, plan, project, stack)
    if outcome.halted:
        failed = [a.stage for a in outcome.state.acceptance.values() if a.status.value == "failed"]
        then = f"--retry-stage {failed[0]}" if failed else "--restart"
        raise GateFailed(f"rollout halted: {outcome.halt_reason}; fix the cause, then `gpufleet rollout -s {stack} "
                         f"{then}`")
    if outcome.finished and outcome.short:
        why = "spares exhausted" if outcome.spares_exhausted else "slots blacklisted or without capacity"
        raise GateFailed(f"rollout ended short of its target: {len(outcome.short)} slot(s) without an admitted node "
                         f"({why}): {', '.join(outcome.short[:10])}")


def _start_job_stream(spec: "ClusterSpec", plan: "ClusterPlan", project: "Project", stack: str) -> None:
    """A simulated stack on its local Slurm: the simulator's job stream as real Slurm jobs on the
    admitted units (gpufleet:simulator.slurmJobSeconds), so sacct and `gpufleet cost` have work to
    read. The rollout's outcome stands either way: a refused job is a warning."""
    from gpufleet.errors import PoolError
    from gpufleet.sim.jobs_slurm import after_rollout

    try:
        line = after_rollout(spec, plan, project, stack, time.time())
    except PoolError as exc:
        click.echo(f"gpufleet: warning: the simulated job stream did not start: {exc}", err=True)
        return
    if line:
        click.echo(f"gpufleet: {line}", err=True)


def _retry(journal: "Journal", stage: str, stack: str) -> None:
    """Journal the operator's retry of a failed acceptance stage (which lifts the halt it caused)."""
    a = journal.state.acceptance.get(stage)
    if a is None or a.status.value != "failed":
        failed = [s for s, x in journal.state.acceptance.items() if x.status.value == "failed"]
        raise UsageError(f"acceptance stage {stage} of {stack} has not failed "
                         f"({'not run' if a is None else a.status.value}): nothing to retry", field="--retry-stage",
                         expected=f"a failed stage ({', '.join(failed) or 'none has failed'})")
    journal.append({"type": "acceptance", "stage": stage, "to": "retry"})
    click.echo(f"gpufleet: retrying acceptance {stage} (attempt {a.attempt + 1})", err=True)


def _write_records(state_dir: Path, state: "RolloutState") -> list[dict]:
    """`<state_dir>/records/<slot>.json`: each slot's latest admission record (derived from the journal)."""
    out = state_dir / "records"
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for slot, n in sorted(state.nodes.items()):
        if n.record is None:
            continue
        records.append(n.record)
        tmp = out / f".{slot}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(n.record, indent=2), encoding="utf-8")  # key order kept: the digest depends on it
        os.replace(tmp, out / f"{slot}.json")
    return records


def _summary(rep, modelled: bool) -> str:
    t = rep.timeline
    lines = [f"rollout {rep.stack}: {rep.status}" + (f" ({rep.halt_reason})" if rep.halt_reason else ""),
             f"  admitted {rep.admitted_nodes}/{rep.target_nodes} nodes = {rep.admitted_gpus} GPUs; "
             f"spares used {rep.spares_used}/{rep.spare_nodes}"]
    for a in rep.acceptance:
        detail = a.figures or a.reason or ", ".join(a.reason_codes)
        lines.append(f"  acceptance {a.stage:<8} {a.status}" + (f": {detail}" if detail else ""))
    for p in rep.partitions:
        lines.append(f"  partition {p.name:<12} {p.units_available}/{p.units_planned} units, {p.gpus_available} GPUs")
    for q in rep.quarantined:
        lines.append(f"  quarantined {q.slot} ({q.instance_id}): {q.reason_code}"
                     + (" -> replaced" if q.replaced else " (not replaced)"))
    for a, b in rep.link_faults:
        lines.append(f"  link fault {a} <-> {b} (escalate; both nodes admitted)")
    kind = "modelled" if modelled else "measured stage"
    if t.get("windowed_s") is not None:
        w = t["window"]
        fabric = "n/a" if t.get("bound_fabric_s") is None else f"{t['bound_fabric_s']:.0f} s"
        lines.append(f"  time-to-pool ({kind}): {t['windowed_s']:.0f} s with up to {w['batches']} batches in flight "
                     f"and {w['fabric_tests']} concurrent fabric tests; lower bound {t['lower_bound_s']:.0f} s "
                     f"({_ratio(t)}; ({t['binds']}) binds: (a) paths "
                     f"{t['bound_paths_s']:.0f} s, (b) fabric {fabric}); one batch at a time: pipelined "
                     f"{t['pipelined_s']:.0f} s, sequential {t['sequential_s']:.0f} s; wall {rep.wall_seconds:.1f} s")
    else:
        lines.append(f"  time-to-pool ({kind}): {t['pipelined_s' if rep.pipelining else 'sequential_s']:.0f} s "
                     f"(sequential {t['sequential_s']:.0f} s, pipelined {t['pipelined_s']:.0f} s, "
                     f"lower bound {t['lower_bound_s']:.0f} s); wall {rep.wall_seconds:.1f} s")
    return "\n".join(lines)


def _ratio(t) -> str:
    """Modelled over bound; a rollout that halted before any batch ran has a bound of 0 and no ratio."""
    return f"{t['windowed_s'] / t['lower_bound_s']:.2f}x" if t["lower_bound_s"] else "no ratio: nothing ran"


def _dry_run(plan, state, location: str, err: bool = False) -> None:
    echo = functools.partial(click.echo, err=err)  # stderr when stdout carries the change set's JSON
    echo(f"journal: {location} ({state.events} events; "
         f"{'halted: ' + state.halt_reason if state.halted else 'finished' if state.finished else 'unfinished' if state.started else 'none yet'})")
    for name, a in state.acceptance.items():
        echo(f"acceptance {name}: {a.status.value} (attempt {a.attempt})"
             + (f" {', '.join(a.reason_codes)}" if a.reason_codes else ""))
    for b in plan.batches:
        bs = state.batches.get(b.number)
        nodes = plan.batch_nodes(b.number)
        decided = [state.nodes[s.name] for s in nodes if s.name in state.nodes
                   and state.nodes[s.name].stage.value in ("admitted", "quarantined")]
        echo(f"batch {b.number}{' (canary)' if b.canary else ''}: {len(nodes)} slots {nodes[0].name} .. "
             f"{nodes[-1].name}; {bs.stage.value if bs else 'pending'}; decided {len(decided)}"
             + "".join(f"\n  {n.slot}: {n.stage.value}{' ' + n.reason_code if n.reason_code else ''}"
                       for n in decided if n.stage.value == "quarantined"))
