"""`gpufleet sim fault -s STACK --slot SLOT --kind xid-79 [--slot-bound] [--clear]`: a running
simulated node develops a fault now (its tools start reporting it), for the patrol to find."""

from __future__ import annotations

from datetime import timedelta

import click

from gpufleet.errors import ConfigError, UsageError


@click.command("fault")
@click.option("-s", "--stack", required=True, help="A simulated stack.")
@click.option("--slot", required=True, help="The node that develops the fault.")
@click.option("--kind", default="xid-79", show_default=True, help="A fault a running node can develop (gpufleet.sim.faults).")
@click.option("--slot-bound", is_flag=True, help="The fault stays with the slot: a replacement instance shows it too.")
@click.option("--clear", is_flag=True, help="Forget the slot's late fault instead.")
def fault(stack: str, slot: str, kind: str, slot_bound: bool, clear: bool) -> None:
    """A simulated node starts reporting a fault (Xid, ECC, NVLink, EFA, slow NVLinks) from now on."""
    from gpufleet.daytwo.context import open_day_two

    with open_day_two(stack, "sim fault") as d:
        if d.simulator is None:
            raise ConfigError("not a simulated stack", path=str(d.project.stack_file(stack)),
                              field="gpufleet:simulator", expected="a simulated stack such as local")
        cloud = d.simulator
        if clear:
            cloud.late.clear(slot)
            click.echo(f"{slot}: late fault cleared")
            return
        inst = cloud.ledger.current().get(slot)
        if inst is None:
            raise UsageError(f"slot {slot!r} has no running instance in stack {stack}", field="--slot",
                             expected="a slot with a running instance (gpufleet pool -s STACK)")
        at = d.now() + timedelta(seconds=1)  # after anything the last patrol saw
        cloud.late.add(slot, kind, at, None if slot_bound else inst.instance_id)
        click.echo(f"{slot} ({inst.instance_id}): {kind} from {at.isoformat()}"
                   + (" (slot-bound)" if slot_bound else ""))
