"""`gpufleet audit -s STACK [--json] [--out DIR]`: every node's installed versions vs the BOM.

Writes the report (JSON, Markdown, JUnit, HTML) to `--out` (default: the project's
`reports/<stack>/`) before it exits: 0 every node read and on the BOM, 4 any mismatch, mixed
group or node without facts, 1 the collection itself failed, 2 bad configuration.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from gpufleet.errors import DriftDetected


@click.command("audit")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema_version'd).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for audit.json/.md/.html and audit-junit.xml (default: reports/<stack>/).")
def audit(stack: str, as_json: bool, out: Path | None) -> None:
    """For every node and every BOM component: expected vs installed; mixed versions flagged first."""
    from gpufleet.plan import plan_stack
    from gpufleet.project import current_project
    from gpufleet.reports.audit import audit_document
    from gpufleet.reports.audit_run import collect_audit
    from gpufleet.reports.stack_sources import stack_sources
    from gpufleet.reports.write import write_report
    from gpufleet.spec import load_stack_path

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    plan = plan_stack(spec)
    report, _ = collect_audit(spec, plan, project, stack, stack_sources(spec, plan, project, stack),
                              datetime.now(timezone.utc))
    paths = write_report(audit_document(report), report, out or project.reports_dir(stack), "audit")
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(summary(report))
        click.echo(f"reports: {', '.join(str(p) for p in paths.values())}")
    if report.status.value != "ok":
        raise DriftDetected(f"audit of {stack}: {len(report.mixed)} mixed group(s), {len(report.mismatched)} node(s) "
                            f"off the BOM, {len(report.uncollected)} without facts")


def summary(report) -> str:
    lines = [f"audit {report.stack}: {len(report.nodes)} node(s), BOM {report.bom_digest[:19]}, OS {report.os}"]
    for m in report.mixed:
        lines.append(f"  MIXED {m.scope} {m.name} {m.component}: "
                     + "; ".join(f"{v} on {len(s)} node(s) ({', '.join(s[:3])}{' ...' if len(s) > 3 else ''})"
                                 for v, s in m.versions.items()))
    for n in report.mismatched[:50]:
        for r in n.mismatches:
            lines.append(f"  {n.slot} ({n.instance_id}) {r.component}: expected {r.expected}, found "
                         f"{r.installed or 'not installed'}")
    for n in report.uncollected:
        lines.append(f"  {n.slot} ({n.instance_id}): no facts ({n.error})")
    for c in report.components:
        lines.append(f"  {c.component:<25} expected {c.expected:<28} "
                     + ", ".join(f"{v}: {k}" for v, k in c.versions.items()))
    return "\n".join(lines)
