"""`gpufleet patrol -s STACK [--json] [--out DIR]`: recheck the idle admitted nodes.

Exit codes: 0 every checked node passed (busy ones skipped), 3 the patrol quarantined something
(the report names the slots to replace), 1 an error (the pool or the transport failed), 2 bad
input. Meant for a schedule (systemd timer, Kubernetes CronJob, CI schedule: README "Day two").
"""

from __future__ import annotations

from pathlib import Path

import click

from gpufleet.errors import GateFailed


@click.command("patrol")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder (default reports/<stack>/).")
@click.option("--force-unlock", is_flag=True, help="Take the stack's lock from a run on another host that is gone.")
def patrol(stack: str, as_json: bool, out_dir: Path | None, force_unlock: bool) -> None:
    """Light recheck of idle admitted nodes; quarantine (and blacklist) the failing ones."""
    from gpufleet.daytwo.collect import collector_for
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.ops import audit
    from gpufleet.daytwo.patrol_report import write
    from gpufleet.daytwo.patrol_run import run_patrol

    def warn(message: str) -> None:
        click.echo(f"gpufleet: warning: {message}", err=True)

    with open_day_two(stack, "patrol", force_unlock=force_unlock, warn=warn) as d:
        outcome = run_patrol(d, collector_for(d))
        for slot, what in sorted(outcome.disagreements.items()):
            warn(f"the scheduler and gpufleet disagree on {slot}: {what} (left as it is)")
        report, paths = write(outcome, out_dir or d.project.reports_dir(stack))
        if report.quarantined:
            audit.day_two(d, "patrol quarantine", "the patrol's gates failed", quarantined=sorted(report.quarantined))
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(f"patrol {stack}: checked {len(report.checked)} idle node(s), skipped {len(report.skipped_busy)} "
                   f"busy, quarantined {len(report.quarantined)}, deferred {len(report.deferred)}, yielded "
                   f"{len(report.yielded)} to real jobs ({len(report.preempted)} preempted)")
        for slot in report.yielded:
            how = "its patrol job was preempted by a real job" if slot in report.preempted else \
                "a real job took it before its round"
            click.echo(f"  yielded      {slot}: {how} (rechecked next patrol)")
        for slot, q in sorted(report.quarantined.items()):
            click.echo(f"  {q['state']:<12} {slot} ({q['failures']} failure(s)) {q['reason_code']}: {q['reason']}")
        for slot in report.blacklisted:
            click.echo(f"  replace {slot}: `gpufleet pool clear {slot} --reason ...` then "
                       f"`gpufleet pool replace -s {stack} {slot} --reason ...`")
        click.echo("reports: " + ", ".join(str(p) for p in paths.values()))
    if report.quarantined:
        raise GateFailed(f"the patrol quarantined {len(report.quarantined)} node(s): "
                         + ", ".join(sorted(report.quarantined)[:10]))
