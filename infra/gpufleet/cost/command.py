"""`gpufleet cost -s STACK [--since ...] [--until ...]`: GPU-hours, their price and the waste.

Thin: read the sources through their adapters (sacct or Kueue Workloads, the stack's journals,
Prometheus; on the simulated pool, the simulator's job stream over the journals' history), call
the pure `report.build`, write reports/<stack>/cost.{json,md,html} and
cost-junit.xml, then exit. A source that could not be read is written into the report as such
and the command exits 1 (usage is unknown, never zero); no price for the stack's instance type
exits 2 naming `gpufleet:cost.pricePerInstanceHour`; bad --since/--until exits 2 naming the flag.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from gpufleet.errors import ConfigError, GpufleetError, UsageError


class CostIncomplete(GpufleetError):
    """A source of the cost report could not be read; the written report says which. Exit 1."""


def _when(flag: str, text: str, now: datetime) -> datetime:
    from gpufleet.cost.usage import parse_when

    try:
        return parse_when(text, now)
    except ValueError as exc:
        raise UsageError(str(exc), field=flag, expected="e.g. 2026-11-01, 2026-11-01T12:00, 30d, 12h") from None


def _formats(text: str) -> list[str]:
    from gpufleet.reports.write import FORMATS

    wanted = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in wanted if f not in FORMATS]
    if not wanted or bad:
        raise UsageError(f"--format {text!r}", field="--format", expected="a comma-separated subset of " + ",".join(FORMATS))
    return wanted


def read_history(spec: Any, project: Any, stack: str) -> tuple[Any, str, list[str]]:
    """(transitions or None, note, problems) from the stack's rollout and day-two journals."""
    from gpufleet.cost.pool_history import transitions
    from gpufleet.daytwo.journal import daytwo_store
    from gpufleet.rollout.journal import JournalError, LocalJournalStore

    backend = spec.rollout.state_backend
    state_dir = project.state_dir(stack)
    try:
        if backend.type == "local":
            store: Any = LocalJournalStore(state_dir / "journal.jsonl")
        else:
            from gpufleet.rollout.backends import S3JournalStore, _boto_client

            store = S3JournalStore(_boto_client("s3", backend.region), backend.bucket, backend.prefix, stack)
        if not store.exists():
            return None, f"no rollout journal at {store.location}: the pool's history is unknown", []
        rollout_events = store.read(repair=False)
        daytwo_events = daytwo_store(store, state_dir, stack).read(repair=False)
    except (JournalError, OSError) as exc:
        return None, "the pool's history could not be read", [f"journal: {exc}"]
    except Exception as exc:  # botocore: credentials, network; named so the report says which store
        return None, "the pool's history could not be read", [f"journal ({type(exc).__name__}): {exc}"]
    return transitions(rollout_events, daytwo_events), "", []


def read_jobs(spec: Any, project: Any, stack: str, window: Any) -> tuple[Any, list[str], list[str]]:
    """(jobs or None, skipped, problems) from the pool's scheduler."""
    if spec.pool.type == "slurm":
        from gpufleet.cost.sacct import SacctError, SacctSource

        env = dict(os.environ)
        if spec.simulated:
            from gpufleet.pool.factory import local_slurm_root
            from gpufleet.pool.slurm.local import LocalSlurm

            env["SLURM_CONF"] = str(LocalSlurm(local_slurm_root(project, stack)).conf_path)
        try:
            jobs, lines = SacctSource(env=env).jobs(window.start, window.end)
        except SacctError as exc:
            return None, [], [str(exc)]
        return jobs, [f"line {s.line}: {s.why}" for s in lines], []
    from gpufleet.cost.kueue import KubernetesWorkloads, KueueError, queue_owners, usages
    from gpufleet.plan import build_plan
    from gpufleet.pool.kubernetes.queues import queue_layout
    from gpufleet.pool.factory import pool_for
    from gpufleet.pool.kubernetes.adapter import KubernetesPool
    from gpufleet.pool.kubernetes.versions import KUEUE_API_VERSION

    from gpufleet.pool.kubernetes.nodes import SLOT_LABEL

    pool = pool_for(spec, project, stack)  # the pool's own kubeconfig and context choice
    assert isinstance(pool, KubernetesPool)
    try:
        owners = queue_owners(queue_layout(spec, build_plan(spec), spec.cluster.instance))  # ClusterQueue -> partition, team
        workloads, skipped = usages(KubernetesWorkloads(pool.api.custom.api_client, KUEUE_API_VERSION.split("/")[1]), owners)
    except (KueueError, ValueError) as exc:
        return None, [], [f"Kueue: {exc}"]
    # Kueue names Nodes; the pool's history names slots (a replacement keeps the slot, not the name)
    slots = {n["metadata"]["name"]: n["metadata"]["labels"][SLOT_LABEL] for n in pool.api.list_nodes(SLOT_LABEL)}
    return [replace(w, nodes=tuple(slots.get(n, n) for n in w.nodes)) for w in workloads], skipped, []


@click.command("cost")
@click.option("-s", "--stack", required=True, help="Stack name: Pulumi.<stack>.yaml")
@click.option("--since", default="30d", show_default=True, help="Start: ISO date/time (UTC without offset) or an age (30d, 12h).")
@click.option("--until", "until", default=None, help="End (default: now), same forms as --since.")
@click.option("--prometheus", default=None, help="Prometheus base URL for GPU utilisation (default: gpufleet:cost.prometheusUrl).")
@click.option("--format", "formats", default="json,md,xml,html", show_default=True, help="Report files to write.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for cost.json/.md/.html and cost-junit.xml (default: reports/<stack>/).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def cost(stack: str, since: str, until: str | None, prometheus: str | None, formats: str, out: Path | None,
         as_json: bool) -> None:
    """GPU-hours and cost per partition, team and job; idle admitted units, low-utilisation jobs and
    quarantined nodes' cost. Exit 1 when a source could not be read, 2 without a price."""
    from gpufleet import catalog
    from gpufleet.cost import prometheus as prom
    from gpufleet.cost import report as rep
    from gpufleet.cost.document import cost_document
    from gpufleet.cost.pricing import OVERRIDE_FIELD, resolve
    from gpufleet.cost.usage import Window
    from gpufleet.plan import build_plan
    from gpufleet.project import current_project
    from gpufleet.reports.write import write_report
    from gpufleet.spec import load_stack_path

    now = datetime.now(timezone.utc)
    start, end = _when("--since", since, now), (_when("--until", until, now) if until else now)
    if end <= start:
        raise UsageError(f"--since {since!r} is not before --until {until or 'now'!r}", field="--since",
                         expected="a start before the end")
    wanted = _formats(formats)
    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    window = Window(start, end)
    plan = build_plan(spec)
    sku = catalog.get(spec.cluster.instance_type)
    units = [rep.UnitNodes(unit=u.id, partition=u.partition, slots=tuple(plan.slot(i).name for i in u.nodes),
                           gpus=len(u.gpus)) for u in plan.units]
    from gpufleet.cost.price_list import SNAPSHOT, read_snapshot

    price, missing = resolve(spec, read_snapshot(project.state_dir(stack) / SNAPSHOT))
    history, history_note, problems = read_history(spec, project, stack)
    if spec.pool.type == "sim":  # the simulator's job stream over the pool's history
        from gpufleet.cost.simulated import sim_jobs
        from gpufleet.sim.jobs import Unit

        sim_units = [Unit(str(u.unit), u.partition or "-", u.slots, u.gpus) for u in units]
        seed = spec.simulator.seed if spec.simulator else 1
        # never rolled out (no journal): no unit was ever admitted, so no job ran
        jobs: Any = None if problems else sim_jobs(sim_units, history or {}, window, now, seed=seed,
                                                   tenants=spec.ops.tenants)  # an unreadable journal: unknown
        skipped: list[str] = []
    else:
        jobs, skipped, more = read_jobs(spec, project, stack, window)
        problems = more + problems
    url = prometheus or spec.cost.prometheus_url
    series = None
    if spec.pool.type == "sim" and not url and history is not None:  # no exporter: the stream's own
        from gpufleet.cost.simulated import sim_utilisation

        series, step = sim_utilisation(sim_units, history, window, now, seed=seed, tenants=spec.ops.tenants)
        note = (f"simulated: the job stream's seeded GPU utilisation (gpufleet.sim.jobs), step {step:g} s; "
                f"--prometheus reads a real one")
    elif url:
        try:
            series, step = prom.fetch(prom.HttpRangeQuery(url), window.seconds, len(plan.nodes))
            note = f"{prom.utilisation_query()} from {url}, step {step:g} s"
        except prom.PrometheusError as exc:
            problems.append(str(exc))
            note = f"not read: {exc}"
    else:
        note = "not read: set gpufleet:cost.prometheusUrl or --prometheus"
    report = rep.build(stack=stack, pool=spec.pool.type, window=window, now=now, instance_type=sku.name,
                       gpus_per_node=sku.gpus, price=price, missing_price=missing, jobs=jobs, skipped=skipped,
                       units=units, history=history, history_note=history_note, utilisation=series,
                       utilisation_note=note, low_util_percent=spec.cost.low_util_percent,
                       min_idle_minutes=spec.cost.min_idle_minutes, problems=problems)
    paths = write_report(cost_document(report), report, out or project.reports_dir(stack), "cost", wanted)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(summary(report))
        click.echo(f"reports: {', '.join(str(p) for p in paths.values())}")
    if problems:
        raise CostIncomplete(f"cost of {stack} is incomplete: " + "; ".join(problems))
    if missing:
        raise ConfigError(missing, field=OVERRIDE_FIELD, expected="USD per instance-hour (a number > 0)")


def summary(report: Any) -> str:
    def usd(v: float | None) -> str:
        return "no price" if v is None else f"${v:,.2f}"

    gh = "unknown" if report.gpu_hours is None else f"{report.gpu_hours:,.1f}"
    lines = [f"cost {report.stack}: {report.window_start:%Y-%m-%d %H:%M} to {report.window_end:%Y-%m-%d %H:%M} UTC, "
             f"{gh} GPU-hours, {usd(report.cost_usd)}"]
    if report.price:
        p = report.price
        lines.append(f"  price: ${p.usd_per_instance_hour:,.3f}/instance-hour ({p.basis}, {p.region}) from {p.source}, dated {p.dated}")
    for title, groups in (("partition", report.by_partition), ("team", report.by_team)):
        for g in groups[:20]:
            lines.append(f"  {title:<9} {g.name:<24} {g.jobs:>6} jobs {g.gpu_hours:>12,.1f} GPU-h  {usd(g.cost_usd)}")
    lines.append(f"  idle admitted units: {len(report.idle_units)}, {report.idle_hours_total:,.1f} h, {usd(report.idle_cost_usd)}"
                 + (f" (not computed: {report.idle_unavailable})" if report.idle_unavailable else ""))
    lines.append(f"  jobs under {report.low_util_percent:g}% GPU utilisation: {len(report.low_util_jobs)} ({report.utilisation})")
    lines.append(f"  quarantined nodes: {len(report.quarantined)}, {usd(report.quarantined_cost_usd)}")
    for problem in [*report.problems, *([report.missing_price] if report.missing_price else [])]:
        lines.append(f"  INCOMPLETE: {problem}")
    return "\n".join(lines)


@click.command()
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--block-hours", default=24, show_default=True, type=click.IntRange(24, 182 * 24),
              help="The Capacity Block duration whose offerings are priced.")
def prices(stack: str, block_hours: int) -> None:
    """Read the stack's instance prices from AWS (Price List API, Capacity Block offerings) into
    the stack's dated price snapshot, which `gpufleet cost` then uses. Exit 1 when AWS cannot be
    reached (the snapshot is left as it was)."""
    import boto3
    from botocore.config import Config

    from gpufleet.cost import price_list as pl
    from gpufleet.project import current_project
    from gpufleet.spec import load_stack_path

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    it, region = spec.cluster.instance_type, spec.cluster.region
    config = Config(connect_timeout=5, read_timeout=20, retries={"max_attempts": 3})
    pricing = boto3.client("pricing", region_name=pl.PRICING_REGION, config=config)
    ec2 = boto3.client("ec2", region_name=region, config=config)
    found = [p for p in (pl.fetch_on_demand(pricing, it, region),) if p is not None]
    found += [pl.reservation(p) for p in found]
    block = pl.fetch_capacity_block(ec2, it, region, hours=block_hours)
    found += [block] if block is not None else []
    path = pl.write_snapshot(project.state_dir(stack) / pl.SNAPSHOT, found, datetime.now(timezone.utc))
    for p in found:
        click.echo(f"{p.instance_type} {p.basis} {p.region}: {p.usd_per_hour:.4f} USD/h ({p.source}; {p.dated})")
    missing = {"on-demand", "capacity-block"} - {p.basis for p in found}
    if missing:
        click.echo(f"no {' or '.join(sorted(missing))} price for {it} in {region} from AWS", err=True)
    click.echo(str(path))
