"""A real stack's side of destroy through the Pulumi Automation API.

What exists is read from `pulumi stack export` (without --show-secrets: secrets stay encrypted):
the GPU node instances by slot and batch, the FSx file systems (with their data repository
associations), and every other resource. Deleting is `pulumi destroy --target` per batch of
GPU nodes, then a whole `pulumi destroy` for the rest.

Why unprotect by editing the export: the GPU nodes, FSx and the Slurm controller are `protect`ed
(so a plain `pulumi up` can never delete them), and `pulumi destroy` refuses a protected resource.
Only the URNs a step is about to delete get `protect: false`, in one `stack import` per step (what
`pulumi state unprotect URN...` does, without one CLI call per URN at 1,250 nodes); a destroy that
stops between the import and the delete leaves only those resources unprotected, and reruns the
step.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Mapping, Sequence

from gpufleet.errors import GpufleetError
from gpufleet.lifecycle.destroy_plan import FileSystem, NodeRef, StackResource

INSTANCE_TYPE = "aws:ec2/instance:Instance"
FSX_TYPE = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA_TYPE = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
SLOT_TAG, BATCH_TAG, ROLE_TAG = "gpufleet.io/slot", "gpufleet.io/batch", "gpufleet.io/role"
NOT_DELETED_BY_URN = ("pulumi:pulumi:Stack", "pulumi:providers:")  # the root and providers go with the stack


def _resources(export: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in (export.get("deployment") or {}).get("resources") or [] if not r.get("delete")]


def gpu_nodes(export: Mapping[str, Any]) -> dict[str, tuple[NodeRef, str]]:
    """slot -> (the node, its URN) for every GPU node instance in the state."""
    out: dict[str, tuple[NodeRef, str]] = {}
    for r in _resources(export):
        if r.get("type") != INSTANCE_TYPE:
            continue
        tags = (r.get("outputs") or {}).get("tags") or {}
        if tags.get(ROLE_TAG) == "gpu-node" and tags.get(SLOT_TAG) and r.get("id"):
            out[tags[SLOT_TAG]] = (NodeRef(tags[SLOT_TAG], int(tags.get(BATCH_TAG) or 0), str(r["id"])), r["urn"])
    return out


def file_systems(export: Mapping[str, Any]) -> list[FileSystem]:
    res = _resources(export)
    links: dict[str, list[str]] = {}
    for r in res:
        if r.get("type") == DRA_TYPE:
            o = r.get("outputs") or {}
            links.setdefault(str(o.get("fileSystemId")), []).append(str(o.get("dataRepositoryPath") or r["urn"]))
    out = []
    for r in res:
        if r.get("type") == FSX_TYPE and r.get("id"):
            o = r.get("outputs") or {}
            out.append(FileSystem(fs_id=str(r["id"]), name=r["urn"].rsplit("::", 1)[-1],
                                  deployment_type=str(o.get("deploymentType") or "unknown"),
                                  repositories=tuple(sorted(links.get(str(r["id"]), []))), urn=r["urn"]))
    return out


def other_resources(export: Mapping[str, Any]) -> list[StackResource]:
    """Everything but the GPU nodes, the file systems, the stack's root and its providers."""
    nodes = {urn for _, urn in gpu_nodes(export).values()}
    fss = {f.urn for f in file_systems(export)}
    return [StackResource(r["urn"], r.get("type", ""), bool(r.get("protect")))
            for r in _resources(export)
            if r["urn"] not in nodes | fss and not str(r.get("type", "")).startswith(NOT_DELETED_BY_URN)]


def unprotected(export: Mapping[str, Any], urns: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """The export with `protect` cleared on those URNs only; and which of them were protected."""
    doc = json.loads(json.dumps(export))
    wanted, changed = set(urns), []
    for r in (doc.get("deployment") or {}).get("resources") or []:
        if r.get("urn") in wanted and r.get("protect"):
            r["protect"] = False
            changed.append(r["urn"])
    return doc, changed


class PulumiTeardown:
    """Terminator (a batch of GPU nodes) and StackRemover (the rest) over an Automation API Stack."""

    def __init__(self, stack: Any, on_output: Any = None) -> None:
        self.stack = stack
        self.on_output = on_output

    def export(self) -> dict[str, Any]:
        result = self.stack._run_pulumi_cmd_sync(["stack", "export"])
        return json.loads(result.stdout)

    def unprotect(self, urns: Sequence[str]) -> list[str]:
        doc, changed = unprotected(self.export(), urns)
        if not changed:
            return []
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(doc, f)
        try:
            self.stack._run_pulumi_cmd_sync(["stack", "import", "--file", f.name])
        finally:
            os.unlink(f.name)
        return changed

    def terminate(self, batch: int, slots: Sequence[str]) -> list[str]:
        nodes = gpu_nodes(self.export())
        present = [nodes[s] for s in slots if s in nodes]
        if not present:
            return []
        urns = [urn for _, urn in present]
        self.unprotect(urns)
        self._destroy(urns)
        return [n.instance_id for n, _ in present]

    def remove(self, targets: Sequence[str]) -> Mapping[str, Any]:
        export = self.export()
        left = {r["urn"] for r in _resources(export)}
        unprotected_now = self.unprotect([u for u in targets if u in left])
        self._destroy(None)
        return {"unprotected": len(unprotected_now), "deleted": len([u for u in targets if u in left])}

    def _destroy(self, targets: list[str] | None) -> None:
        from pulumi import automation as auto

        try:
            self.stack.destroy(target=targets, color="never", suppress_progress=True, on_output=self.on_output)
        except auto.errors.CommandError as exc:
            text = str(exc).strip().splitlines()
            raise GpufleetError(f"pulumi destroy of stack {self.stack.name}"
                                f"{f' ({len(targets)} targets)' if targets else ''} failed: "
                                f"{' '.join(text[-3:])[:600] if text else type(exc).__name__}") from None
