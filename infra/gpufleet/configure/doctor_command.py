"""`gpufleet doctor -s STACK --host HOST`: the read-only checks of the first real node of a new AMI
or BOM, before the first `rollout` (gpufleet.configure.doctor says which and why).

Exit codes: 0 the node is what the BOM and the roles say; 4 it differs (each difference printed);
1 the node could not be read (unreachable, the playbook failed); 2 bad input.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import click

from gpufleet.envelope import dumps, envelope
from gpufleet.errors import DriftDetected, ExternalCommandFailed


def document(stack: str, host: str, bom: str, diffs: Sequence[Any]) -> dict[str, Any]:
    """`gpufleet doctor --json`: the host, the BOM it was read against and each difference."""
    return envelope("doctor", stack, {"host": host, "bom": bom, "ok": not diffs,
                                      "differences": [asdict(d) for d in diffs]}, schema_version=1)


def read_node(executor: Any, host: str, pool: str | None, dest: Path) -> dict[str, Any]:
    """Run playbooks/doctor.yml on `host` through the stack's executor; doctor.json's contents."""
    from gpufleet.configure.doctor import DOCTOR_FILE, doctor_commands
    from gpufleet.ports import HostStatus, Instance

    slot = "doctor"
    result = executor.run_playbook("doctor", [Instance(slot=slot, instance_id="", batch=0, block=0, private_ip=host)],
                                   "doctor.yml", {"gpufleet_doctor_commands": doctor_commands(pool),
                                                  "gpufleet_bundle_dir": str(dest)})
    outcome = result.hosts[slot]
    if outcome.status is not HostStatus.OK:
        raise ExternalCommandFailed(f"doctor.yml on {host}", f"{outcome.status.value}: {outcome.message}")
    path = dest / slot / DOCTOR_FILE
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ExternalCommandFailed(f"doctor.yml on {host}", f"{path}: {exc}") from None


@click.command("doctor")
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--host", required=True, help="The node's address (SSH, as the rollout reaches it).")
@click.option("--user", default=None, help="SSH user (default: the AMI family's, ubuntu or ec2-user).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the differences as one JSON document (the envelope every JSON has; `differences`).")
def doctor(stack: str, host: str, user: str | None, as_json: bool) -> None:
    """Read one node and say what differs from the BOM and the roles (exit 4 when anything does)."""
    from gpufleet.bom import load_bom, resolve_bom_path
    from gpufleet.configure.doctor import findings
    from gpufleet.configure.executor import stack_executor
    from gpufleet.configure.inventory import SshConnection
    from gpufleet.project import current_project
    from gpufleet.spec import load_stack_path

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    bom = load_bom(resolve_bom_path(spec, project))
    login = user or ("ec2-user" if spec.image.os == "al2023" else "ubuntu")
    executor = stack_executor(spec, project, stack, SshConnection(user=login))
    with tempfile.TemporaryDirectory(prefix="gpufleet-doctor-") as tmp:
        collected = read_node(executor, host, spec.pool.type, Path(tmp))
    diffs = findings(collected, bom, spec.pool.type)
    if as_json:  # the envelope every JSON has (issue 23 item 8), not a bare list
        click.echo(dumps(document(stack, host, bom.name, diffs)))
    elif diffs:
        click.echo(f"{host}: {len(diffs)} difference(s) from BOM {bom.name} and the roles:")
        for d in diffs:
            click.echo(f"  {d.check:<26} expected {d.expected}; found {d.found}  [{d.source}]")
    else:
        click.echo(f"{host}: as BOM {bom.name} and the roles say")
    if diffs:
        raise DriftDetected(f"{host} differs from the BOM in {len(diffs)} check(s)")
