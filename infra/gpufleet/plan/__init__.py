"""Capacity planning: a ClusterSpec in, a ClusterPlan with findings out.

`build_plan` is pure. `plan_stack` adds the findings of the stack's bill of materials,
which it reads from disk (`gpufleet.bom.bom_findings`).
"""

from __future__ import annotations

from typing import Sequence

from gpufleet.aws_rules import aws_findings
from gpufleet.bom import bom_findings
from gpufleet.findings import Finding, error, info, sort_findings, warning
from gpufleet.plan.batches import batch_of_block, plan_batches
from gpufleet.plan.memory import memory_fit
from gpufleet.plan.model import ClusterPlan
from gpufleet.plan.network import plan_network
from gpufleet.plan.partitions import allocate
from gpufleet.plan.storage import plan_storage
from gpufleet.plan.storage_clients import storage_client_findings
from gpufleet.plan.topology import build_topology, layout
from gpufleet.project import Project
from gpufleet.spec import ClusterSpec

__all__ = ["build_plan", "plan_stack", "ClusterPlan"]


def plan_stack(spec: ClusterSpec, project: Project | None = None) -> ClusterPlan:
    """The plan with the stack's bill-of-materials findings: the one entry point that reads a file.

    The BOM is the project's (`image.bom` relative to its root); default: the current project."""
    return build_plan(spec, extra_findings=bom_findings(spec, project))


def build_plan(spec: ClusterSpec, extra_findings: Sequence[Finding] = ()) -> ClusterPlan:
    """Pure: the same spec always gives the same plan."""
    c = spec.cluster
    instance = c.instance
    findings: list[Finding] = []
    topo, f = build_topology(c.name, c.target_gpus, c.unit_gpus, instance.gpus, c.spare_fraction)
    findings += f
    allocations, f = allocate(spec.partitions, topo.units, topo.blocks, topo.units_per_block, c.unit_gpus)
    findings += f
    block_partition = {b: a.name for a in allocations for b in a.blocks}
    batches, f = plan_batches(topo.nodes, topo.nodes_per_block, spec.rollout.canary_fraction, spec.rollout.batch_size,
                              spec.acceptance.smoke_nodes)
    findings += f
    slots, units, blocks = layout(c.name, topo, batch_of_block(batches), block_partition)
    network, f = plan_network(spec.network, instance, topo.nodes, topo.spare_nodes, spec.pool.type,
                              c.availability_zone)
    findings += f
    storage, f = plan_storage(spec.storage, instance, topo.nodes)
    findings += f
    if not spec.simulated:  # the simulator answers for its planned slots, not for client instances
        a = spec.acceptance
        findings += storage_client_findings(storage, a.storage_clients, a.storage_client_type)
    memory = None
    if spec.model is not None:
        memory, f = memory_fit(spec.model, instance, c.unit_gpus)
        findings += f
    findings += _rollout_findings(spec, len(batches))
    findings += _monitoring_findings(spec)
    findings += _smoke_runtime_findings(spec)
    findings += _sim_acceptance_findings(spec, {s.name for s in slots})
    findings += aws_findings(spec, topo.nodes + topo.spare_nodes)  # AWS API rules the mocks cannot see
    findings += extra_findings
    return ClusterPlan(cluster=c.name, region=c.region, availability_zone=c.availability_zone,
                       instance_type=c.instance_type, target_gpus=c.target_gpus, topology=topo, nodes=tuple(slots),
                       units=tuple(units), blocks=tuple(blocks), partitions=tuple(allocations),
                       batches=tuple(batches), network=network, storage=storage, memory=memory,
                       findings=tuple(sort_findings(findings)))


def _sim_acceptance_findings(spec: ClusterSpec, slots: set[str]) -> list[Finding]:
    """ERROR for a simulated acceptance fault on a slot the plan does not have: it would never be
    met, and the stage would pass with the fault "seeded"."""
    if spec.simulator is None:
        return []
    faults = spec.simulator.acceptance
    named = [*faults.bad_mgmt_nodes, *([faults.diverging_node] if faults.diverging_node else [])]
    unknown = [s for s in named if s not in slots]
    if not unknown:
        return []
    return [error("SIM_FAULT_SLOT_UNKNOWN", "gpufleet:simulator.acceptance",
                  f"names slot(s) the plan does not have: {', '.join(unknown)}; the plan's slots are "
                  f"{min(slots)} .. {max(slots)} (`gpufleet plan -s STACK` lists them)")]


def _rollout_findings(spec: ClusterSpec, batches: int) -> list[Finding]:
    target = spec.rollout.target_batch
    if target is not None and target > batches:
        return [info("TARGET_PAST_LAST_BATCH", "gpufleet:rollout.targetBatch",
                     f"targetBatch {target} is past the last batch ({batches}): all batches")]
    return []


def _monitoring_findings(spec: ClusterSpec) -> list[Finding]:
    """Kubernetes: Prometheus scrapes `gpufleet ops serve` only at `ops.alertWebhookUrl`
    (`gpufleet.pool.kubernetes.monitoring_manifests.ops_serve_scrape_config`); a Slurm head node runs it locally."""
    if spec.pool.type == "kubernetes" and spec.ops.alert_webhook_url is None:
        return [warning("OPS_METRICS_NOT_SCRAPED", "gpufleet:ops.alertWebhookUrl",
                        "no address for `gpufleet ops serve`: Prometheus never scrapes its gpufleet_node_admitted "
                        "and gpufleet_node_busy, so GpuUtilisationLow, GpuUtilisationHigh and GpuMemoryHigh "
                        "cannot fire, and alerts never quarantine")]
    return []


def _smoke_runtime_findings(spec: ClusterSpec) -> list[Finding]:
    """A real Slurm stack's smoke job runs in the workload image (pyxis) or with `smokePython` on the
    node (`gpufleet.rollout.acceptance.stack_hooks`); with neither set it would run the node's python3,
    which has no torch, and fail after the canary (`smoke-failed`). A Kubernetes stack's runs only in
    the image (`gpufleet.rollout.kubernetes_smoke`): without one it is not run at all."""
    a = spec.acceptance
    if not spec.simulated and spec.pool.type == "kubernetes" and a.workload_image is None:
        return [warning("SMOKE_NOT_RUN", "gpufleet:acceptance.workloadImage",
                        "a Kubernetes pool runs the training smoke job only in the workload image (its nodes have "
                        "no torch): without acceptance.workloadImage (repo@sha256:<digest>) the smoke stage is "
                        "journaled not applicable and the stack records no training baseline")]
    if spec.simulated or spec.pool.type != "slurm" or a.workload_image is not None \
            or "smoke_python" in a.model_fields_set:
        return []
    return [warning("SMOKE_NO_TORCH", "gpufleet:acceptance.workloadImage",
                    "the training smoke job would run the nodes' python3, which has no torch, and fail after "
                    "the canary: set acceptance.workloadImage (an image with torch, repo@sha256:<digest>, run "
                    "through pyxis) or acceptance.smokePython (an interpreter with torch on every node)")]
