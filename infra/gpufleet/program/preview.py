"""`gpufleet preview --offline`: the program's resource graph and policy verdicts, no cloud.

Runs the real program under mocks (`capture.capture_program`), summarises what `pulumi up`
would register (counts by type and batch, the interface layout, storage) and runs the policy
rules over it. A mandatory violation is a gate failure (exit 3); an ERROR finding of the plan
(BOM rules included) stops the program itself, so the preview exits 2 naming every one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpufleet import tagging as t
from gpufleet.program.capture import Capture, capture_program
from pydantic.alias_generators import to_snake

from gpufleet.envelope import envelope
from gpufleet.errors import GateFailed
from gpufleet.spec import ClusterSpec
from gpufleet.policies.evaluate import evaluate

PREVIEW_SCHEMA_VERSION = 2  # 2: an integer in the envelope, snake_case keys (1 was "1" and camelCase)
INSTANCE = "aws:ec2/instance:Instance"


def preview_report(capture: Capture) -> dict[str, Any]:
    regs = capture.registrations
    violations = evaluate((r.type, r.name, r.inputs, r.outputs) for r in regs)
    by_batch = Counter(str(r.inputs["tags"][t.BATCH]) for r in regs
                       if r.type == INSTANCE and r.inputs["tags"].get(t.ROLE) == "gpu-node")
    lts = [r for r in regs if r.type == "aws:ec2/launchTemplate:LaunchTemplate"]
    fsx = next(r for r in regs if r.type == "aws:fsx/lustreFileSystem:LustreFileSystem")
    return envelope("preview", capture.stack, {
        "cluster": capture.spec.cluster.name,
        "pool": capture.spec.pool.type,
        "batches": len(capture.plan.batches),
        "deployed_batches": capture.outputs.get("deployedBatches"),
        "resources": len(regs),
        "by_type": dict(sorted(Counter(r.type for r in regs).items())),
        "instances_by_batch": {b: by_batch[b] for b in sorted(by_batch, key=int)},
        "interfaces": {lt.inputs["instanceType"]: [
            {"card": n["networkCardIndex"], "device": n["deviceIndex"], "type": n["interfaceType"],
             "security_groups": len(n.get("securityGroups") or [])} for n in lt.inputs["networkInterfaces"]]
            for lt in lts},
        # the FSx inputs under their snake_case names (Pulumi's deploymentType is deployment_type)
        "storage": {to_snake(k): fsx.inputs.get(k) for k in ("deploymentType", "storageType", "storageCapacity",
                                                             "perUnitStorageThroughput", "throughputCapacity",
                                                             "efaEnabled", "dataCompressionType")},
        "policies": [{"policy": v.policy, "level": v.level, "resource": v.resource, "message": v.message}
                     for v in violations],
        "mandatory_violations": sum(1 for v in violations if v.mandatory),
    }, schema_version=PREVIEW_SCHEMA_VERSION)


def render_text(report: dict[str, Any]) -> str:
    lines = [f"preview (offline, mocks) of stack {report['stack']}: cluster {report['cluster']}, pool {report['pool']}",
             f"  {report['resources']} resources; batches deployed {report['deployed_batches']} of {report['batches']}",
             "  by type:"]
    lines += [f"    {n:5d}  {typ}" for typ, n in report["by_type"].items()]
    lines.append("  instances by batch: " + (", ".join(f"{b}: {n}" for b, n in report["instances_by_batch"].items())
                                            or "none (raise gpufleet:rollout.targetBatch)"))
    for itype, ifaces in report["interfaces"].items():
        kinds = Counter(i["type"] for i in ifaces)
        lines.append(f"  {itype} interfaces: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                     + f" over {len({i['card'] for i in ifaces})} cards, "
                       f"{min(i['security_groups'] for i in ifaces)} security groups on each")
    s = report["storage"]
    lines.append(f"  FSx: {s['deployment_type']} {s['storage_type']} {s['storage_capacity']} GiB, "
                 f"{s['per_unit_storage_throughput'] or s['throughput_capacity']} throughput, "
                 f"efa={bool(s['efa_enabled'])}, {s['data_compression_type']}")
    if report["policies"]:
        lines.append("  policy violations:")
        lines += [f"    [{v['level']}] {v['policy']}: {v['resource'] or 'stack'}: {v['message']}"
                  for v in report["policies"]]
    else:
        lines.append("  policies: all passed")
    return "\n".join(lines)


def run_preview(spec: ClusterSpec, stack: str, target_batch: int | None = None,
                recorded_batches: int | None = None) -> dict[str, Any]:
    return preview_report(capture_program(spec, stack=stack, target_batch=target_batch,
                                          recorded_batches=recorded_batches))


def gate(report: dict[str, Any]) -> None:
    if report["mandatory_violations"]:
        raise GateFailed(f"preview of {report['stack']}: {report['mandatory_violations']} mandatory policy violation(s)")
