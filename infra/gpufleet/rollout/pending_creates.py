"""Pending create operations in a Pulumi state: what a `pulumi up` killed mid-flight leaves behind.

Why: the engine writes a `creating` pending operation before it asks EC2 for an instance and
clears it when the instance is recorded. A SIGKILL in between leaves the operation in the state
and, possibly, an instance in EC2 the state does not know: the next `up` would create a second
instance for the same slot. Pulumi's documented ways out are `pulumi refresh
--clear-pending-creates`, `pulumi import`, or editing the exported state and importing it back
(https://www.pulumi.com/docs/iac/support/troubleshooting/#interrupted-update-recovery). This module
reads the export and builds the edited one (pure); the provisioner finds the orphans by their slot
tag, terminates them (never configured, never gated) and imports the edited state before any `up`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gpufleet import tagging as t

INSTANCE_TYPE = "aws:ec2/instance:Instance"


@dataclass(frozen=True)
class PendingCreate:
    urn: str
    slot: str


def _deployment(export: Mapping[str, Any]) -> Mapping[str, Any]:
    return export.get("deployment", export)


def pending_instance_creates(export: Mapping[str, Any]) -> list[PendingCreate]:
    """The `creating` pending operations on EC2 instances of a `pulumi stack export` document, with
    the slot each was for (its slot tag, else the resource's name, which the program makes the slot)."""
    out = []
    for op in _deployment(export).get("pending_operations") or ():
        r = op.get("resource") or {}
        if op.get("type") != "creating" or r.get("type") != INSTANCE_TYPE:
            continue
        tags = (r.get("inputs") or {}).get("tags") or {}
        out.append(PendingCreate(urn=r["urn"], slot=tags.get(t.SLOT) or r["urn"].rsplit("::", 1)[-1]))
    return out


def without_pending(export: Mapping[str, Any], urns: Sequence[str]) -> dict[str, Any]:
    """The export with those pending creates dropped (for `pulumi stack import`); the rest untouched."""
    doc = copy.deepcopy(dict(export))
    dep = doc.get("deployment", doc)
    drop = set(urns)
    dep["pending_operations"] = [op for op in dep.get("pending_operations") or ()
                                 if (op.get("resource") or {}).get("urn") not in drop]
    return doc


def orphans(pending: Sequence[PendingCreate], live: Mapping[str, Sequence[str]],
            recorded: Sequence[str]) -> dict[str, list[str]]:
    """slot -> live EC2 instances tagged for a slot with a pending create that the state never recorded."""
    known = set(recorded)
    return {p.slot: [i for i in live.get(p.slot, ()) if i not in known] for p in pending
            if any(i not in known for i in live.get(p.slot, ()))}
