"""The `gpufleet` command: parse arguments, call the library, map errors to exit codes.

Exit codes (DESIGN.md section 8): 0 ok, 1 error, 2 usage or configuration, 3 a gate said
no, 4 drift or audit difference. Only this module catches `GpufleetError`.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import click

from gpufleet.errors import ConfigError, ConfigErrors, GpufleetError

if TYPE_CHECKING:
    from gpufleet.findings import Finding

EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_GATE, EXIT_DRIFT = 0, 1, 2, 3, 4
# Every JSON document a command prints carries `schema_version` (snake_case, like plan and admission records).
VALIDATE_SCHEMA_VERSION = 2  # 2: an integer, in the envelope (gpufleet.envelope); it was the string "1"


class _Group(click.Group):
    """Maps library errors to exit codes; click's own usage errors already exit 2."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except GpufleetError as exc:
            click.echo(f"gpufleet: {exc}" if not isinstance(exc, ConfigError) else _config_error_text(exc), err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("gpufleet: interrupted", err=True)
            ctx.exit(EXIT_ERROR)
        except Exception:  # an unexpected bug: say so, with the traceback, and exit 1
            click.echo("gpufleet: unexpected error\n" + traceback.format_exc(), err=True)
            ctx.exit(EXIT_ERROR)


def _config_error_text(exc: ConfigError) -> str:
    return "gpufleet: invalid configuration\n" + "\n".join(f"  {line}" for line in exc.render().splitlines())


stack_option = click.option("-s", "--stack", required=True,
                            help="Stack name: Pulumi.<stack>.yaml in the project's stackConfigDir")
stacks_dir_option = click.option("--stacks-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                                 help="Folder of stack files (default: the project's stackConfigDir)")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpufleet")
@click.option("--project", type=click.Path(path_type=Path), default=None, envvar="GPUFLEET_PROJECT",
              help="The project folder (default: the nearest Pulumi.yaml upwards, like the Pulumi CLI).")
def main(project: Path | None) -> None:
    """gpufleet: a GPU cluster from a stack file to a verified scheduling pool.

    Every command works on a project: the nearest Pulumi.yaml upwards from the current folder,
    or --project / GPUFLEET_PROJECT. Stacks come from its stackConfigDir; images/, playbooks/
    and policies/ from its root.
    """


def _load(stack: str, stacks_dir: Path | None):
    from gpufleet import spec

    return spec.load_stack(stack, stacks_dir)  # no --stacks-dir: the current project's stackConfigDir


def _source(stack: str, stacks_dir: Path | None) -> str:
    from gpufleet import spec

    return spec.display_path(spec.stack_file(stack, stacks_dir))


@main.command()
@stack_option
@stacks_dir_option
@click.option("--cloud", is_flag=True, help="Add live AWS checks (quotas, capacity, offerings) with boto3.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def validate(stack: str, stacks_dir: Path | None, cloud: bool, as_json: bool) -> None:
    """Check a stack: schema, then semantic findings. Exit 2 on any ERROR.

    With --json a schema error is a JSON document too (`errors`, each with file, field,
    message and expected), so a pipeline never has to parse the text form.
    """
    from gpufleet.findings import has_errors, sort_findings
    from gpufleet.plan import plan_stack

    try:
        spec = _load(stack, stacks_dir)
    except ConfigError as exc:
        if not as_json:
            raise
        errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        click.echo(json.dumps(_validate_document(stack, errors=errors), indent=2))
        sys.exit(EXIT_CONFIG)
    plan = plan_stack(spec)
    findings = list(plan.findings)
    if cloud:
        from gpufleet.validate_cloud import cloud_findings

        findings.extend(cloud_findings(spec, plan))
    findings = sort_findings(findings)
    if as_json:
        click.echo(json.dumps(_validate_document(stack, findings=findings), indent=2))
    else:
        source = _source(stack, stacks_dir)
        for f in findings:
            click.echo(f"{source}: {f.render()}")
        errors = sum(1 for f in findings if f.level.value == "ERROR")
        click.echo(f"{source}: {errors} error(s), {len(findings) - errors} other finding(s)")
    if has_errors(findings):
        sys.exit(EXIT_CONFIG)


def _validate_document(stack: str, *, errors: Sequence[ConfigError] = (), findings: Sequence[Finding] = ()) -> dict:
    """`validate --json`: schema errors (the file is unusable) or the findings, in one shape."""
    from gpufleet.envelope import envelope

    return envelope("validate", stack, {
        "errors": [{"file": e.path, "line": e.line, "field": e.field, "message": e.message, "expected": e.expected}
                   for e in errors],
        "findings": [f.model_dump(mode="json") for f in findings],
    }, schema_version=VALIDATE_SCHEMA_VERSION)


@main.command()
@stack_option
@stacks_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the full plan as JSON (with schema_version).")
def plan(stack: str, stacks_dir: Path | None, as_json: bool) -> None:
    """Plan a stack: nodes, blocks, units, partitions, batches, IPs, storage, memory fit."""
    from gpufleet.findings import has_errors
    from gpufleet.plan import plan_stack
    from gpufleet.plan.render import render_summary

    spec = _load(stack, stacks_dir)
    the_plan = plan_stack(spec)
    if as_json:
        from gpufleet.envelope import dumps, envelope

        body = the_plan.model_dump(mode="json")
        click.echo(dumps(envelope("plan", stack, body, schema_version=body.pop("schema_version"))))
    else:
        click.echo(render_summary(the_plan, spec.rollout.max_batches_in_flight, spec.rollout.max_fabric_tests))
    if has_errors(the_plan.findings):
        sys.exit(EXIT_CONFIG)


@main.command()
@stack_option
@stacks_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the build as JSON (the envelope; `argv` the list).")
def image(stack: str, stacks_dir: Path | None, as_json: bool) -> None:
    """Print the Packer build of this stack's node AMI (same roles, same BOM as a live configure).

    Writes the extravars file the build reads; runs nothing. Exit 2 when the stack or its BOM
    has an ERROR finding.
    """
    import shlex

    from gpufleet.bom import load_bom, resolve_bom_path
    from gpufleet.configure.image import extravars_file_for, packer_invocation, packer_template, write_image_extravars
    from gpufleet.findings import has_errors
    from gpufleet.plan import plan_stack
    from gpufleet.project import current_project

    project = current_project()
    spec = _load(stack, stacks_dir)
    errors = [f for f in plan_stack(spec, project).findings if f.level.value == "ERROR"]
    if has_errors(errors):
        for f in errors:
            click.echo(f"{_source(stack, stacks_dir)}: {f.render()}", err=True)
        sys.exit(EXIT_CONFIG)
    bom = load_bom(resolve_bom_path(spec, project))
    extravars = write_image_extravars(spec, bom, extravars_file_for(stack, spec, project))
    argv = packer_invocation(spec, bom, extravars_file=extravars, template=packer_template(project))
    if as_json:
        from gpufleet.envelope import dumps, envelope

        click.echo(dumps(envelope("image", stack, {"argv": argv, "bom_digest": bom.digest()}, schema_version=1)))
    else:
        click.echo(shlex.join(argv))


# --- commands from other packages (one import and one add_command each) --------------------
from gpufleet.program.preview_command import preview as _preview_command  # noqa: E402
main.add_command(_preview_command)
from gpufleet.gates.command import gate as _gate_command  # noqa: E402
main.add_command(_gate_command)
from gpufleet.init_project import init as _init_command  # noqa: E402
main.add_command(_init_command)
from gpufleet.rollout.command import rollout as _rollout_command  # noqa: E402
main.add_command(_rollout_command)
from gpufleet.pool.command import pool as _pool_command  # noqa: E402
main.add_command(_pool_command)
from gpufleet.reports.drift_command import drift as _drift_command  # noqa: E402
main.add_command(_drift_command)
from gpufleet.reports.audit_command import audit as _audit_command  # noqa: E402
main.add_command(_audit_command)
from gpufleet.sim.drift_command import sim as _sim_command  # noqa: E402
main.add_command(_sim_command)
from gpufleet.daytwo.patrol_command import patrol as _patrol_command  # noqa: E402
main.add_command(_patrol_command)
from gpufleet.sim.late_command import fault as _sim_fault_command  # noqa: E402
_sim_command.add_command(_sim_fault_command)
from gpufleet.daytwo.upgrade_command import upgrade as _upgrade_command  # noqa: E402
main.add_command(_upgrade_command)
from gpufleet.ops.command import ops as _ops_command  # noqa: E402
main.add_command(_ops_command)
from gpufleet.ops.command import history as _history_command  # noqa: E402
main.add_command(_history_command)
from gpufleet.ops.command import readmit as _readmit_command  # noqa: E402
_pool_command.add_command(_readmit_command)
from gpufleet.cost.command import cost as _cost_command  # noqa: E402
main.add_command(_cost_command)
from gpufleet.cost.command import prices as _prices_command  # noqa: E402
main.add_command(_prices_command)
from gpufleet.daytwo.breaker_command import breaker as _breaker_command  # noqa: E402
_ops_command.add_command(_breaker_command)
from gpufleet.daytwo.remediation_command import remediation as _remediation_command  # noqa: E402
_ops_command.add_command(_remediation_command)
from gpufleet.configure.doctor_command import doctor as _doctor_command  # noqa: E402
main.add_command(_doctor_command)
from gpufleet.lifecycle.destroy_command import destroy as _destroy_command  # noqa: E402
main.add_command(_destroy_command)


if __name__ == "__main__":  # pragma: no cover
    main()
