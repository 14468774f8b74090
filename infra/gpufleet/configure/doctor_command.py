"""`gpufleet doctor -s STACK --host HOST`: the read-only checks of the first real node of a new AMI
or BOM, before the first `rollout` (gpufleet.configure.doctor says which and why).

The node is reached as `gpufleet rollout` reaches it (the stack's `gpufleet:configure` connection,
gpufleet.configure.doctor_node), and it probes the services it must reach before a rollout
(gpufleet.configure.reachability), addressed by the stack's Pulumi outputs.

Exit codes: 0 the node is what the BOM and the roles say (paths it could not test are printed as
"not checked", never passed); 4 it differs (each difference printed); 1 the node could not be read
(unreachable, the playbook failed); 2 bad input.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Sequence

import click

from gpufleet.envelope import dumps, envelope
from gpufleet.errors import ConfigError, DriftDetected, ExternalCommandFailed, UsageError


def document(stack: str, host: str, bom: str, diffs: Sequence[Any], notes: Sequence[Any] = ()) -> dict[str, Any]:
    """`gpufleet doctor --json`: the host, the BOM it was read against, each difference, and each
    path it could not check (so `ok` is never read as "every path was tested")."""
    return envelope("doctor", stack, {"host": host, "bom": bom, "ok": not diffs,
                                      "differences": [asdict(d) for d in diffs],
                                      "notes": [asdict(n) for n in notes]}, schema_version=1)


def read_node(executor: Any, instance: Any, pool: str | None, dest: Path,
              reach: Sequence[Any] = ()) -> dict[str, Any]:
    """Run playbooks/doctor.yml on `instance` (a gpufleet.ports.Instance) through the stack's executor,
    its TCP probes to `reach` included; doctor.json's contents."""
    from gpufleet.configure.doctor import DOCTOR_FILE, doctor_commands
    from gpufleet.ports import HostStatus

    where = instance.private_ip or instance.instance_id
    result = executor.run_playbook("doctor", [instance], "doctor.yml",
                                   {"gpufleet_doctor_commands": doctor_commands(pool, reach),
                                    "gpufleet_bundle_dir": str(dest)})
    outcome = result.hosts[instance.slot]
    if outcome.status is not HostStatus.OK:
        raise ExternalCommandFailed(f"doctor.yml on {where}", f"{outcome.status.value}: {outcome.message}")
    path = dest / instance.slot / DOCTOR_FILE
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ExternalCommandFailed(f"doctor.yml on {where}", f"{path}: {exc}") from None


def stack_outputs(spec: Any, project: Any, stack: str, path: Path | None) -> tuple[dict[str, Any] | None, str | None]:
    """The stack's Pulumi outputs (from `--outputs`, else the stack itself), or None and why not: the
    reachability targets then become notes, never passes."""
    if path is not None:
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the stack outputs: {exc}", path=str(path),
                              expected="the JSON of `pulumi stack output --json --show-secrets -s STACK`") from None
        if not isinstance(value, dict):
            raise ConfigError("the stack outputs are no JSON object", path=str(path),
                              expected="the JSON of `pulumi stack output --json --show-secrets -s STACK`")
        return value, None
    if spec.simulated:
        return None, "a simulated stack has no Pulumi outputs"
    try:
        from pulumi.automation.errors import CommandError

        from gpufleet.cloud.pulumi_stack import output_values, select_stack
    except ImportError as exc:
        return None, f"the Pulumi Automation API is not installed here ({exc})"
    try:
        return output_values(select_stack(project, stack)), None
    except (CommandError, OSError) as exc:  # no such stack, no backend login, no pulumi CLI
        text = str(exc).strip()
        return None, text.splitlines()[0][:200] if text else type(exc).__name__


def node_connection(spec: Any, project: Any, outputs: Mapping[str, Any], kind: str | None, user: str | None) -> Any:
    """The stack's `gpufleet:configure` connection (as `gpufleet rollout` reaches its nodes), or `kind`;
    `--user` replaces SSH's login."""
    from gpufleet.configure.inventory import SshConnection
    from gpufleet.configure.stack_connection import connection_for

    if kind and kind != spec.configure.connection:
        spec = spec.model_copy(update={"configure": spec.configure.model_copy(update={"connection": kind})})
    connection = connection_for(spec, outputs, project)
    if user is not None:
        if not isinstance(connection, SshConnection):
            raise UsageError("--user is the SSH login; this stack's nodes are reached over SSM",
                             field="--user", expected="--connection ssh with --user, or no --user")
        connection = replace(connection, user=user)
    return connection


@click.command("doctor")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--host", required=True,
              help="The node: a slot, instance id or private IP of the stack's `nodes` output (over SSH also any "
                   "address SSH resolves).")
@click.option("--connection", "kind", type=click.Choice(["ssm", "ssh"]), default=None,
              help="How to reach it (default: the stack's gpufleet:configure.connection, as `rollout` does).")
@click.option("--user", default=None, help="SSH user (default: the stack's sshUser, else ubuntu or ec2-user).")
@click.option("--outputs", "outputs_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The stack's outputs as `pulumi stack output --json --show-secrets` prints them "
                   "(default: read from the stack).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the differences as one JSON document (the envelope every JSON has; `differences`).")
def doctor(stack: str, host: str, kind: str | None, user: str | None, outputs_file: Path | None,
           as_json: bool) -> None:
    """Read one node and say what differs from the BOM and the roles (exit 4 when anything does)."""
    from gpufleet.bom import load_bom, resolve_bom_path
    from gpufleet.configure import reachability
    from gpufleet.configure.doctor import findings
    from gpufleet.configure.doctor_node import doctor_instance
    from gpufleet.configure.executor import stack_executor
    from gpufleet.configure.inventory import SsmConnection
    from gpufleet.project import current_project
    from gpufleet.spec import load_stack_path

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    bom = load_bom(resolve_bom_path(spec, project))
    outputs, why = stack_outputs(spec, project, stack, outputs_file)
    try:
        connection = node_connection(spec, project, outputs or {}, kind, user)
        instance = doctor_instance(host, isinstance(connection, SsmConnection), outputs or {})
    except ConfigError as exc:
        if why is None or isinstance(exc, UsageError):
            raise
        raise ConfigError(f"{exc.message}; the stack's outputs could not be read ({why})", field=exc.field,
                          expected="--outputs FILE (`pulumi stack output --json --show-secrets -s STACK`), "
                                   f"or {exc.expected}") from None
    reach, notes = reachability.targets(spec.pool.type, outputs, outputs_error=why,
                                        slurmdbd_port=spec.ops.slurmdbd_port if spec.ops.slurm_accounting else None)
    executor = stack_executor(spec, project, stack, connection)
    with tempfile.TemporaryDirectory(prefix="gpufleet-doctor-") as tmp:
        collected = read_node(executor, instance, spec.pool.type, Path(tmp), reach)
    diffs = findings(collected, bom, spec.pool.type, reach)
    if as_json:  # the envelope every JSON has (issue 23 item 8), not a bare list
        click.echo(dumps(document(stack, host, bom.name, diffs, notes)))
    elif diffs:
        click.echo(f"{host}: {len(diffs)} difference(s) from BOM {bom.name} and the roles:")
        for d in diffs:
            click.echo(f"  {d.check:<26} expected {d.expected}; found {d.found}  [{d.source}]")
    else:
        more = f"; {len(notes)} path(s) not checked, below" if notes else ""
        click.echo(f"{host}: as BOM {bom.name} and the roles say{more}")
    for n in notes if not as_json else ():  # with --json they are the document's `notes`
        click.echo(f"  not checked: {n.check:<20} {n.detail}  [{n.source}]")
    if diffs:
        raise DriftDetected(f"{host} differs from the BOM in {len(diffs)} check(s)")
