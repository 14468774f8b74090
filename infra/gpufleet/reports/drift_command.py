"""`gpufleet drift -s STACK [--layer cloud|software|performance] [--json] [--out DIR]`.

Writes the report (JSON, Markdown, JUnit, HTML) to `--out` (default: the project's
`reports/<stack>/`) before it exits: 0 no drift, 4 drift found, 1 a layer could not run (the
report says which and why; it is never read as clean), 2 bad configuration.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from gpufleet.errors import DriftDetected, ExternalCommandFailed


@click.command("drift")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--layer", "layers", type=click.Choice(["cloud", "software", "performance"]), multiple=True,
              help="Run only this layer (repeatable; default: all three).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema_version'd).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for drift.json/.md/.html and drift-junit.xml (default: reports/<stack>/).")
@click.option("--regression-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="A baseline this fraction below its history regresses (default: gates.driftRegressionFraction).")
@click.option("--expiry-hours", type=click.FloatRange(0), default=72.0, show_default=True,
              help="Warn about capacity reservations or blocks ending within this many hours.")
def drift(stack: str, layers: tuple[str, ...], as_json: bool, out: Path | None, regression_fraction: float | None,
          expiry_hours: float) -> None:
    """What differs from code (cloud), from the BOM (node software) and from the last baselines."""
    from gpufleet.plan import plan_stack
    from gpufleet.project import current_project
    from gpufleet.reports.drift import LAYERS, Layer, drift_document
    from gpufleet.reports.drift_run import DriftOptions, run_drift
    from gpufleet.reports.stack_sources import stack_sources
    from gpufleet.reports.write import write_report
    from gpufleet.spec import load_stack_path

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    plan = plan_stack(spec)
    sources = stack_sources(spec, plan, project, stack)
    options = DriftOptions(layers=tuple(Layer(x) for x in layers) if layers else LAYERS,
                           regression_fraction=regression_fraction or spec.gates.drift_regression_fraction,
                           expiry_warning=timedelta(hours=expiry_hours))
    report = run_drift(spec, plan, project, stack, sources, options, datetime.now(timezone.utc))
    paths = write_report(drift_document(report), report, out or project.reports_dir(stack), "drift")
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(summary(report))
        click.echo(f"reports: {', '.join(str(p) for p in paths.values())}")
    status = report.status.value
    if status == "error":
        broken = [f"{x.layer.value} ({'; '.join(x.errors)})" for x in report.layers if x.errors]
        raise ExternalCommandFailed("drift", f"layer(s) could not run: {', '.join(broken)}"
                                    + (f"; {len(report.findings)} finding(s) in the others" if report.findings else ""))
    if status == "drift":
        raise DriftDetected(f"drift in {stack}: {len(report.findings)} finding(s)")


def summary(report) -> str:
    lines = [f"drift {report.stack}: {report.status.value}"]
    for layer in report.layers:
        lines.append(f"  {layer.layer.value:<12} {layer.status.value}"
                     + (f" ({len(layer.findings)} finding(s))" if layer.findings else ""))
        lines += [f"    could not run: {e}" for e in layer.errors]
    for f in report.findings[:50]:
        exp = f" expected {f.expected or '-'}, found {f.found or '-'}" if (f.expected or f.found) else ""
        lines.append(f"  [{f.severity.value}] {f.layer.value}/{f.check} {f.subject} {f.field}:{exp} - {f.message}")
    if len(report.findings) > 50:
        lines.append(f"  ... {len(report.findings) - 50} more in the report")
    return "\n".join(lines)
