"""`gpufleet ops rules|serve` and `gpufleet history`: monitoring files, the alert receiver, the audit log.

Thin: load the stack, call the pure modules (`rules`, `scrape`, `webhook`), write or serve.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
import yaml

from gpufleet.errors import ExternalCommandFailed, UsageError

stack_opt = click.option("-s", "--stack", required=True, help="Stack name: Pulumi.<stack>.yaml")


def _context(stack: str) -> tuple[Any, Any]:
    from gpufleet.project import current_project
    from gpufleet.spec import load_stack_path

    project = current_project()
    return project, load_stack_path(project.stack_file(stack))


def thresholds(spec: Any, project: Any) -> Any:
    """The rules' inputs: the gates' settings and the BOM's DCGM for this stack, its ops keys."""
    from gpufleet.bom import load_bom
    from gpufleet.monitoring.rules import Thresholds
    from gpufleet.rollout.wiring import gate_settings

    settings = gate_settings(spec, project)
    bom = load_bom(project.path(spec.image.bom))
    return Thresholds(ops=spec.ops, remap_uncorrectable_limit=settings.remap_uncorrectable_limit,
                      dcgm_version=bom.components.dcgm.version, lustre_mount=spec.storage.mount_path)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@click.group()
def ops() -> None:
    """Monitoring rules from the BOM and the gates, and the Alertmanager receiver that quarantines."""


@ops.command()
@stack_opt
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the rules, their promtool tests, the DCGM counters and the scrape config.")
@click.option("--alertmanager", default="127.0.0.1:9093", show_default=True, help="host:port (Slurm head node).")
@click.option("--gpufleet", "gpufleet_target", default="127.0.0.1:9797", show_default=True,
              help="host:port of `gpufleet ops serve` (its /metrics).")
def rules(stack: str, out: Path, alertmanager: str, gpufleet_target: str) -> None:
    """Write the Prometheus rules (and their unit tests) generated for STACK."""
    from gpufleet.monitoring import counters as monitoring_counters, metrics, scrape
    from gpufleet.monitoring.rules import rules_document, unit_tests
    from gpufleet.plan import build_plan

    project, spec = _context(stack)
    t = thresholds(spec, project)
    doc = rules_document(t, stack)
    dump = lambda d: yaml.safe_dump(d, sort_keys=False, width=120)  # noqa: E731
    _write(out / scrape.RULE_FILE, dump(doc))
    for name, test in unit_tests(t, stack, f"../{scrape.RULE_FILE}").items():
        _write(out / "tests" / f"{name}.test.yml", dump(test))
    _write(out / "dcgm-counters.csv", monitoring_counters.deployed_csv(t.dcgm_version))
    written = [scrape.RULE_FILE, "tests/", "dcgm-counters.csv"]
    if spec.pool.type == "kubernetes":
        _write(out / "prometheusrule.yaml", dump(scrape.prometheus_rule(doc, stack)))
        written.append("prometheusrule.yaml")
    else:
        slots = [n.name for n in build_plan(spec).nodes]
        _write(out / "prometheus.yml", dump(scrape.prometheus_config(alertmanager=alertmanager,
                                                                      gpufleet=gpufleet_target)))
        for job, port in ((metrics.DCGM_JOB, spec.ops.dcgm_exporter_port), (metrics.NODE_JOB, spec.ops.node_exporter_port)):
            _write(out / scrape.TARGETS_DIR / f"{job}.json", json.dumps(scrape.targets(slots, port), indent=1))
        written += ["prometheus.yml", f"{scrape.TARGETS_DIR}/"]
    n = len(doc["groups"][1]["rules"])
    click.echo(f"{out}: {n} alerts, {len(doc['groups'][0]['rules'])} recording rules ({', '.join(written)})")


TOKEN_FILE = "webhook.token"  # under the stack's state dir; Alertmanager's copy is the role's


def _token(token_file: Path | None, state_dir: Path, no_auth: bool) -> str | None:
    from gpufleet import masking
    from gpufleet.ops.server import read_token

    if no_auth:
        return None
    path = token_file or state_dir / TOKEN_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: the webhook token cannot be read ({exc.strerror})", field="--token-file",
                         expected="a token file (gpufleet ops token -s STACK writes one), or --no-auth on a "
                                  "test bench") from None
    token = read_token(text, str(path))
    masking.register(token)
    return token


@ops.command()
@stack_opt
@click.option("--rotate", is_flag=True, help="Replace an existing token (then reconfigure Alertmanager).")
def token(stack: str, rotate: bool) -> None:
    """Write the webhook's bearer token (0600) to the stack's state dir; print its path, never it."""
    import secrets

    from gpufleet.durable import write_atomic

    project, _ = _context(stack)
    path = project.state_dir(stack) / TOKEN_FILE
    if path.exists() and not rotate:
        raise UsageError(f"{path} exists", field="--rotate", expected="--rotate to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, secrets.token_urlsafe(32) + "\n")  # mkstemp: created 0600
    click.echo(str(path))


@ops.command()
@stack_opt
@click.option("--listen", default="127.0.0.1:9797", show_default=True, help="host:port to listen on.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"The bearer token Alertmanager sends (default: the stack's state dir/{TOKEN_FILE}).")
@click.option("--no-auth", is_flag=True, help="Accept calls without a token (a closed test bench only).")
@click.option("--rate", default=20.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Requests a second per caller (beyond the burst: 429).")
@click.option("--burst", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--timeout", "read_timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.5),
              help="Seconds a connection may take to send its request.")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None, help="Serve HTTPS with this certificate (PEM).")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None, help="The certificate's private key (PEM).")
@click.option("--client-ca", type=click.Path(dir_okay=False), default=None,
              help="Mutual TLS: require a client certificate signed by this CA (PEM); needs --tls-cert.")
def serve(stack: str, listen: str, token_file: Path | None, no_auth: bool, rate: float, burst: int,
          read_timeout: float, tls_cert: str | None, tls_key: str | None, client_ca: str | None) -> None:
    """Receive Alertmanager notifications: quarantine within the alert budget, page beyond it."""
    from gpufleet.daytwo.context import pool_view
    from gpufleet.ops import actions, audit, server

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise UsageError(f"--listen {listen!r} is not host:port", field="--listen",
                         expected="a host and a TCP port from 1 to 65535, e.g. 127.0.0.1:9797")
    if (tls_cert is None) != (tls_key is None) or (client_ca is not None and tls_cert is None):
        raise UsageError("--tls-cert and --tls-key go together, and --client-ca needs them", field="--tls-cert",
                         expected="--tls-cert FILE --tls-key FILE [--client-ca FILE], or none of them (plain HTTP)")
    tls = server.tls_context(tls_cert, tls_key, client_ca) if tls_cert is not None and tls_key is not None else None
    project, spec = _context(stack)
    state_dir = project.state_dir(stack)
    settings = server.Settings(token=_token(token_file, state_dir, no_auth), rate=rate, burst=burst,
                               read_timeout_s=read_timeout)
    handler = logging.StreamHandler()
    handler.setFormatter(server.SafeFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # /metrics: the pool as patrol sees it (on a simulated stack, with the job stream's busy nodes), lock-free
    the_pool = pool_view(spec, project, stack)

    def audited(what: str, why: str, details: dict[str, Any]) -> None:
        who = actions.ACTOR if what == "webhook accepted" else f"webhook caller {details.get('caller')}"
        audit.record(state_dir, stack, what, why, who=who, details=details, warn=logging.getLogger("gpufleet.ops").warning)

    def send_pages(pages: Any) -> None:
        for p in pages:
            audit.record(state_dir, stack, "alert page", p.why, target=p.slot, who=actions.ACTOR,
                         details={"alertname": p.alertname, "evidence": p.evidence})
        actions.page(pages, stack, spec.ops.page_command)

    def failed(item: Any, exc: Exception) -> None:
        audit.record(state_dir, stack, "alert not applied", str(exc), who=actions.ACTOR,
                     details={"group": item.note.groupKey, "alerts": len(item.note.alerts), "caller": item.caller})

    pager = server.Pager(send_pages)
    try:
        httpd = server.serve(host, int(port), apply=lambda note: actions.handle(note, stack, project, pager=pager).summary(),
                             pool_state=the_pool.state, settings=settings, audit=audited, on_failed=failed,
                             tls=tls)
    except OSError as exc:  # the port is taken, the address is not this host's, a privileged port
        raise ExternalCommandFailed(f"listening on {listen}", exc.strerror or str(exc)) from None
    auth = "no authentication (--no-auth)" if settings.token is None else "bearer token required"
    if client_ca is not None:
        auth += ", client certificate required (mutual TLS)"
    scheme = "https" if tls is not None else "http"
    click.echo(f"gpufleet ops serve: stack {stack} on {scheme}://{host}:{httpd.server_address[1]}/ "
               f"(alert budget {spec.ops.max_quarantine_share:.0%} of a partition; {auth})", err=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        pager.stop()


@click.command()
@stack_opt
@click.option("--since", default=None, help="ISO date or time (UTC when no offset), e.g. 2026-11-30T12:00.")
@click.option("--json", "as_json", is_flag=True, help="The records as one JSON document (the envelope; `records`).")
@click.option("--verify", is_flag=True, help="Check the whole hash chain; a broken one names its first broken "
                                            "record and exits 4.")
def history(stack: str, since: str | None, as_json: bool, verify: bool) -> None:
    """Who changed the fleet, what, when and why (the stack's audit log)."""
    from gpufleet.errors import DriftDetected
    from gpufleet.ops import audit

    project, _ = _context(stack)
    if verify:
        v = audit.verify(project.state_dir(stack))
        how = "HMAC-signed with the stack's audit key" if v.signed else "hashed (no audit key: not signed)"
        legacy = f", {v.legacy} unchained records from before the chain" if v.legacy else ""
        if not v.ok:
            raise DriftDetected(f"{project.state_dir(stack) / audit.FILE}: record {v.broken_at} breaks the chain: "
                                f"{v.why}; the {v.records} records before it verify ({how}{legacy})")
        click.echo(f"{project.state_dir(stack) / audit.FILE}: {v.records} records, the chain verifies ({how}{legacy})")
        mirror = audit.s3_log_for(project.state_dir(stack), stack)
        if mirror is not None:  # the bucket's copy (Object Lock where the bucket has it)
            copy = mirror.lines()
            cv = audit.verify_lines(copy, audit.audit_key(project.state_dir(stack)))
            if not cv.ok:
                raise DriftDetected(f"{mirror.location}: record {cv.broken_at} breaks the chain: {cv.why}")
            differs = audit.first_difference(audit.local_lines(project.state_dir(stack)), copy)
            if differs is not None:
                raise DriftDetected(f"{project.state_dir(stack) / audit.FILE}: record {differs} differs from the copy "
                                    f"in {mirror.location} (changed or removed here)")
            click.echo(f"{mirror.location}: {cv.records} records, the copy verifies and agrees")
        return
    when = None
    if since:
        try:
            when = datetime.fromisoformat(since)
        except ValueError:
            raise UsageError(f"--since {since!r} is not an ISO date or time", field="--since",
                             expected="e.g. 2026-11-30 or 2026-11-30T12:00") from None
        when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    records = audit.read(project.state_dir(stack), when)
    if as_json:  # one document with the envelope every JSON has (issue 23 item 8), not a line per record
        from gpufleet.envelope import dumps, envelope

        click.echo(dumps(envelope("history", stack, {"since": when.isoformat() if when else None,
                                                     "records": list(records)}, schema_version=1)))
        return
    for rec in records:
        click.echo(f"{rec['at']}  {rec['who']}  {rec['what']}"
                   + (f" {rec['target']}" if rec.get("target") else "") + f": {rec['why']}")


@click.command()
@click.option("-s", "--stack", default=None, help="Stack name: Pulumi.<stack>.yaml")
@click.argument("slot")
@click.option("--reason", required=True, help="Why (journaled and audited with who asked).")
@click.option("--force-unlock", is_flag=True, help="Take the stack's lock from a run on another host that is gone.")
@click.pass_context
def readmit(ctx: click.Context, stack: str | None, slot: str, reason: str, force_unlock: bool) -> None:
    """Send a quarantined SLOT through its gates again: admitted on a passing record, quarantined
    again (a failure toward its blacklist) otherwise, exit 3. Resolved alerts never re-admit."""
    from gpufleet.daytwo.context import open_day_two
    from gpufleet.errors import GateFailed
    from gpufleet.ops import audit
    from gpufleet.ops.readmit import readmit as regate

    name = stack or (ctx.parent.params.get("stack") if ctx.parent else None)
    if not name:
        raise UsageError("which stack?", field="-s/--stack", expected="gpufleet pool readmit -s STACK SLOT --reason WHY")
    warn = lambda m: click.echo(f"gpufleet: warning: {m}", err=True)  # noqa: E731
    with open_day_two(name, "pool readmit", force_unlock=force_unlock, warn=warn) as d:
        node, record, text = regate(d, slot, reason)
        audit.record(d.state_dir, name, "pool readmit", reason, target=slot, who=d.who, warn=warn,
                     details={"state": node.state.value, "outcome": text})
    click.echo(f"{slot}: {text}")
    if record is None:
        raise GateFailed(f"{slot}: failed its gates again ({node.state.value})")


@ops.command()
@stack_opt
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the access objects (Kubernetes) or the sacctmgr commands and AllowAccounts (Slurm).")
def access(stack: str, out: Path) -> None:
    """Write per-team access to the partitions from gpufleet:ops.tenants (nothing is applied).

    Kubernetes: what the pool applies for the teams (`gpufleet.pool.kubernetes`): per team queue
    `<partition>-<team>` its namespace, LocalQueue, ClusterQueue, Role and RoleBinding, and the policy
    holding every Job to its namespace's queue; teams.json says the labels a team's Job carries.
    Slurm: the sacctmgr script `gpufleet pool access apply` runs (what an empty slurmdbd lacks)."""
    import shlex

    from gpufleet.plan import access as acc
    from gpufleet.plan import build_plan

    project, spec = _context(stack)
    if not spec.ops.tenants:
        raise UsageError(f"stack {stack!r} declares no tenants", field="gpufleet:ops.tenants",
                         expected="a list of {name, partitions, members}")
    plan = build_plan(spec)
    names = [p.name for p in plan.partitions]
    acc.check_tenants(spec.ops.tenants, names)
    if spec.pool.type == "kubernetes":
        from gpufleet.pool.kubernetes import queues as q
        from gpufleet.pool.kubernetes.submission_policy import submission_policy
        from gpufleet.pool.kubernetes.team_access import team_access, team_group

        teams = [t for t in q.queue_layout(spec, plan, spec.cluster.instance) if t.team is not None]
        borrow = spec.pool.kueue_cohort_borrowing
        docs: list[dict] = []
        for t in teams:
            docs += [q.namespace(t), q.local_queue(t), q.cluster_queue(t, names, borrow), *team_access([t])]
        docs += submission_policy()
        _write(out / "kubernetes-access.yaml", yaml.safe_dump_all(docs, sort_keys=False))
        summary = [{"team": t.team, "group": team_group(t.team or ""), "partition": t.partition, "namespace": t.namespace,
                    "units": t.units, "gpus": t.gpus, "labels": q.submission_labels(t)} for t in teams]
        _write(out / "teams.json", json.dumps(summary, indent=2))
        click.echo(f"{out / 'kubernetes-access.yaml'}: {len(docs)} objects; {out / 'teams.json'}: {len(teams)} team queues")
        return
    from gpufleet.pool.slurm.access_apply import partition_quotas

    cmds = acc.sacctmgr_commands(spec.ops.tenants, partition_quotas(plan), spec.cluster.name,
                                 preemption=spec.pool.preemption != "off")
    _write(out / "sacctmgr.sh", "#!/bin/sh\nset -e\n" + "\n".join(shlex.join(c) for c in cmds) + "\n")
    allow = acc.allow_accounts(spec.ops.tenants, names)
    _write(out / "allow-accounts.json", json.dumps(allow, indent=2))  # slurm.conf AllowAccounts= per partition
    click.echo(f"{out}: sacctmgr.sh ({len(cmds)} commands), allow-accounts.json ({len(allow)} partitions)")
