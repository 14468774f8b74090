"""`gpufleet destroy -s STACK [--yes] [--dry-run] [--cancel-jobs] [--skip-backup] [--jobs-timeout S] [--json]`.

Drains the pool, waits for its jobs (or cancels them with --cancel-jobs), terminates the GPU nodes
batch by batch, saves each FSx file system (a final backup, or an export to its S3 data
repository), deletes the rest of the stack through Pulumi (unprotecting only what each step
deletes), and archives the rollout journal. Every step is journaled under
`<state_dir>/destroy/`; an interrupted destroy resumes where it stopped when run again.

On a simulated stack (`local`, `local-slurm`) it never asks and empties the simulated world (and
drains, releases and stops the local Slurm). On a real one it shows the change set and asks at a
terminal; off a terminal it refuses without --yes (exit 2), before anything is touched.

Exit codes: 0 done (or nothing to destroy), 1 a step failed (resumable: the message names it),
2 bad usage or a refused confirmation.
"""

from __future__ import annotations

from dataclasses import replace

import click

from gpufleet.changeset_command import confirm_changes, yes_option


@click.command("destroy")
@click.option("-s", "--stack", required=True, help="Stack name: Pulumi.<stack>.yaml in the project's stackConfigDir")
@yes_option
@click.option("--dry-run", is_flag=True, help="Print the change set (what would be drained, terminated, saved and "
                                              "deleted); change nothing.")
@click.option("--cancel-jobs", is_flag=True, help="Cancel the jobs running on the drained nodes instead of waiting "
                                                  "for them.")
@click.option("--skip-backup", is_flag=True, help="Delete the FSx file systems without a final backup or export.")
@click.option("--jobs-timeout", type=click.FloatRange(min=0), default=None,
              help="Seconds to wait for running jobs before the destroy stops (default: upgrade.drainTimeoutS).")
@click.option("--force-unlock", is_flag=True, help="Take the stack's lock from a run on another host that is gone.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as one JSON document (kind destroy).")
def destroy(stack: str, yes: bool, dry_run: bool, cancel_jobs: bool, skip_backup: bool, jobs_timeout: float | None,
            force_unlock: bool, as_json: bool) -> None:
    """Remove the stack's cluster: drain, jobs, GPU nodes by batch, storage (saved first), the rest."""
    from gpufleet.cost.pricing import resolve
    from gpufleet.lifecycle import destroy_plan as dp
    from gpufleet.lifecycle import destroy_run
    from gpufleet.lifecycle.destroy_journal import DestroyJournal, destroy_store
    from gpufleet.lifecycle.destroy_side import open_side
    from gpufleet.ops import audit
    from gpufleet.project import current_project
    from gpufleet.rollout.backends import open_backend
    from gpufleet.rollout.lock import LockInfo
    from gpufleet.spec import load_stack_path

    def warn(message: str) -> None:
        click.echo(f"gpufleet: warning: {message}", err=True)

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    state_dir = project.state_dir(stack)
    deadline = jobs_timeout if jobs_timeout is not None else spec.upgrade.drain_timeout_s
    store, lock = open_backend(spec.rollout.state_backend, state_dir, stack, LockInfo.mine(stack),
                               force=force_unlock, warn=warn, region=spec.cluster.region)
    journal = DestroyJournal(state_dir, stack, warn=warn, store=destroy_store(store, state_dir, stack, warn))
    state = journal.load(repair=not dry_run)
    side = open_side(spec, project, stack, store, jobs_deadline_s=deadline, warn=warn)
    resuming = state.unfinished
    steps = state.remaining() if resuming else dp.plan_steps(
        side.world, policy="cancel" if cancel_jobs else "wait", skip_backup=skip_backup)
    if not steps:
        _say(stack, as_json, {"destroyed": False, "steps": [], "why": "nothing to destroy"},
             f"destroy {stack}: nothing to destroy (no instances, pool nodes, storage, stack resources or journal)")
        return
    policy = "cancel" if cancel_jobs or any(s.kind == "jobs" and s.action == "cancel" for s in state.steps) else "wait"
    steps = [replace(s, action=policy) if s.kind == "jobs" else s for s in steps]  # a resumed run may switch to cancel
    price, why_not = resolve(spec)
    changes = dp.change_set(stack, side.world, steps, usd_per_instance_hour=price.usd_per_instance_hour if price else None,
                            price_note=price.source if price else (why_not or ""), deadline_s=deadline)
    if resuming:
        click.echo(f"gpufleet: resuming the destroy of {stack} at step {steps[0].id} "
                   f"({len(steps)} of {len(state.steps)} steps left)", err=True)
    if not confirm_changes(changes, yes=yes, dry_run=dry_run, as_json=as_json):
        return
    with lock:
        if not resuming:
            journal.append({"to": "planned", "steps": [s.to_json() for s in steps], "policy": policy,
                            "skip_backup": skip_backup})

        def shown(step: dp.Step, what: str) -> None:
            if what == "done":
                click.echo(f"destroy {stack}: {step.id} done", err=as_json)

        try:
            ran = destroy_run.run(journal, side.ports, destroy_run.Options(policy=policy, deadline_s=deadline),
                                  on_step=shown)
        except destroy_run.StepFailed as exc:
            audit.record(state_dir, stack, "destroy", f"step failed: {exc}", simulated=spec.simulated, warn=warn,
                         details={"failed": list(journal.state.failed), "done": list(journal.state.done)})
            journal.close()
            raise
        done = dict(journal.state.done)
        journal.close()
        archived = journal.archive()
    saved = [str(r["saved"]) for r in done.values() if r.get("saved")]
    counts = {"terminated": sum(len(r.get("terminated") or []) for r in done.values()),
              "drained": sum(len(r.get("drained") or []) for r in done.values()), "saved": saved}
    audit.record(state_dir, stack, "destroy", "cluster destroyed", simulated=spec.simulated, warn=warn,
                 details={**counts, "steps": ran, "journal": archived})
    _say(stack, as_json, {"destroyed": True, "steps": [{"id": k, **v} for k, v in done.items()], **counts,
                          "journal": archived},
         f"destroy {stack}: done: {counts['drained']} node(s) drained, {counts['terminated']} instance(s) terminated"
         + (f", saved {', '.join(saved)}" if saved else "") + f"; journal {archived}")


def _say(stack: str, as_json: bool, body: dict, text: str) -> None:
    if as_json:
        from gpufleet.envelope import dumps, envelope

        click.echo(dumps(envelope("destroy", stack, body, schema_version=1)))
    else:
        click.echo(text)
