"""The human summary of a ClusterPlan printed by `gpufleet plan`."""

from __future__ import annotations

from gpufleet.plan.model import ClusterPlan
from gpufleet.plan.window import window_budget


def render_summary(plan: ClusterPlan, max_batches_in_flight: int | None = None,
                   max_fabric_tests: int | None = None) -> str:
    t, n, s = plan.topology, plan.network, plan.storage
    lines = [
        f"gpufleet plan: {plan.cluster} ({plan.instance_type} in {plan.availability_zone}, schema {plan.schema_version})",
        "",
        f"Nodes       {t.nodes} x {t.gpus_per_node} GPUs = {t.nodes * t.gpus_per_node} GPUs for {plan.target_gpus} "
        f"requested, + {t.spare_nodes} spare node(s)",
        f"Blocks      {t.blocks} blocks of {t.nodes_per_block} node(s) / {t.block_gpus} GPUs, "
        f"{t.units_per_block} unit(s) each",
        f"Units       {t.units} units of {t.unit_gpus} GPUs; one node failure kills up to {t.max_blast_radius} unit(s)",
    ]
    for alt in t.alternatives:
        lines.append(f"  aligned   {alt.unit_gpus}-GPU units: {alt.units} units, blocks of {alt.nodes_per_block} "
                     f"node(s), blast radius {alt.max_blast_radius}")
    lines.append("Partitions")
    for p in plan.partitions:
        blocks = f"blocks {p.blocks[0]}-{p.blocks[-1]}" if p.blocks else "no blocks"
        quota = f", quota {p.quota_units}" if p.quota_units is not None else ""
        lines.append(f"  {p.name:<12} {p.mode:<18} {p.units:>5} units / {p.gpus:>6} GPUs ({blocks}), "
                     f"priority {p.priority}{quota}")
    if not plan.partitions:
        lines.append("  (none)")
    lines.append("Batches")
    for b in plan.batches:
        kind = "canary" if b.canary else "batch "
        lines.append(f"  {b.number:>3} {kind} {b.node_count:>4} nodes  blocks {b.blocks[0]}-{b.blocks[-1]}  "
                     f"{plan.nodes[b.first_node].name} .. {plan.nodes[b.last_node].name}")
    budget = window_budget(plan, max_batches_in_flight, max_fabric_tests)
    lines += [
        "Rollout window",
        f"  {budget.describe()}",
        "  time-to-pool lower bound: the larger of (a) acceptance stages + the canary's path + the longest "
        "other batch's path and (b) acceptance stages + the canary's path + the other batches' multi-node "
        f"test time / {budget.fabric_limit} (the fabric's limit, not a setting); `rollout` prints the modelled "
        "figure beside it and which binds",
        "Network",
        f"  per node  {n.interface_ips_per_node} interface IP(s) + {n.pod_ips_per_node} pod IP(s); "
        f"{n.efa_interfaces_per_node} EFA interfaces",
    ]
    for sub in (n.compute, n.management):
        mark = "ok" if sub.fits else "TOO SMALL"
        lines.append(f"  {sub.name:<10} {sub.cidr:<18} {sub.size:>6} addresses, needs {sub.needed:>6} "
                     f"(smallest fit /{sub.smallest_prefix})  {mark}")
    cap = f"{s.capacity_gib} GiB" if s.capacity_gib is not None else "elastic"
    tier = f"{s.throughput_per_tib} MB/s/TiB" if s.throughput_per_tib else "Intelligent-Tiering"
    lines += [
        "Storage",
        f"  FSx for Lustre {s.storage_class}{' EFA' if s.efa_enabled else ''}: {cap} for {s.needed_tib} TiB "
        f"needed, {tier}, {s.aggregate_throughput_mbs} MB/s",
        f"  checkpoint write {s.checkpoint_write_seconds:.0f} s at {s.effective_throughput_mbs} MB/s "
        f"(target {s.target_checkpoint_write_seconds:.0f} s)",
    ]
    if plan.memory:
        m = plan.memory
        lines += ["Memory fit",
                  f"  {m.parameters_billions}B params: {m.total_gib} GiB of {m.usable_gib} GiB usable per unit "
                  f"-> {'fits' if m.fits else 'DOES NOT FIT'}"]
    lines.append(f"Findings ({len(plan.findings)})")
    lines += [f"  {f.render()}" for f in plan.findings] or ["  none"]
    return "\n".join(lines)
