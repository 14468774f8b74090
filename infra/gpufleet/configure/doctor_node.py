"""Which node `gpufleet doctor --host` names, addressed the way the stack's connection reaches it.

Why: `gpufleet rollout` reaches nodes over the stack's `gpufleet:configure` connection, SSM by
instance id by default (the nodes have no inbound SSH path and the program installs no key), SSH
by private IP otherwise. doctor must reach the first real node the same way, so `--host` may be a
slot, an instance id or a private IP; the stack's `nodes` output (gpufleet.program: {batch: [{slot,
instanceId, privateIp, ...}]}) turns one into what the connection needs. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpufleet.errors import ConfigError
from gpufleet.ports import Instance

SLOT = "doctor"  # the node's inventory host name in doctor.yml's run
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")


def output_nodes(value: Any) -> list[tuple[str, str, str | None]]:
    """(slot, instance id, private IP) of each row of the `nodes` output; rows it cannot read are skipped."""
    rows: list[tuple[str, str, str | None]] = []
    for batch in (value or {}).values() if isinstance(value, Mapping) else ():
        for row in batch if isinstance(batch, list) else ():
            if isinstance(row, Mapping) and row.get("slot") and row.get("instanceId"):
                rows.append((str(row["slot"]), str(row["instanceId"]), row.get("privateIp") or None))
    return rows


def doctor_instance(host: str, ssm: bool, outputs: Mapping[str, Any]) -> Instance:
    """The node `host` names (a slot, instance id or private IP of the `nodes` output; else, over SSH, any
    address SSH resolves; over SSM, any instance id) as an Instance the connection can reach."""
    for slot, instance_id, ip in output_nodes(outputs.get("nodes")):
        if host in (slot, instance_id, ip):
            if not ssm and not ip:
                raise ConfigError(f"node {slot} ({instance_id}) has no private IP in the stack's `nodes` output, "
                                  "which SSH connects to", field="--host",
                                  expected="the node's private IP, or --connection ssm")
            return Instance(slot=SLOT, instance_id=instance_id, batch=0, block=0, private_ip=ip)
    if ssm:
        if _INSTANCE_ID.match(host):
            return Instance(slot=SLOT, instance_id=host, batch=0, block=0)
        raise ConfigError(f"{host!r} is no slot, instance id or private IP of the stack's `nodes` output, and the "
                          "SSM connection reaches a node by its instance id", field="--host",
                          expected="an instance id (i-...), a slot or private IP the `nodes` output lists, "
                                   "or --connection ssh")
    if _INSTANCE_ID.match(host):
        raise ConfigError(f"{host} is no node of the stack's `nodes` output, and SSH needs its address",
                          field="--host", expected="the node's private IP or DNS name, or --connection ssm")
    return Instance(slot=SLOT, instance_id="", batch=0, block=0, private_ip=host)
