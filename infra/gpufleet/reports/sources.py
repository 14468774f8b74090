"""What the drift and audit reports read, behind small Protocols, and the real adapters.

The decisions (`drift_cloud`, `drift_software`, `drift_performance`, `audit`) never call out; these
adapters only carry: the Pulumi Automation API (preview and refresh event streams, the exported
state), boto3 (the scan for what Pulumi does not know), ansible-runner (one check-mode run of
site.yml: the tasks it would change and, from the same run, the `gpufleet` fact of
playbooks/roles/node_facts), and the stored baselines under `.gpufleet/<stack>/`. The simulated
stacks answer through `gpufleet.sim.drift` with the same Protocols.

Every failure of a call is `ExternalCommandFailed` naming the call; the report then marks the
layer as not run (exit 1) instead of reading it as clean.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from gpufleet import tagging as t
from gpufleet.errors import ExternalCommandFailed
from gpufleet.reports.audit import NodeFacts
from gpufleet.reports.drift_cloud import (CloudInstance, CloudScan, Reservation, StateView, StepView, TemplateVersion,
                                       ec2_rules)
from gpufleet.reports.drift_performance import PerfSnapshot, is_new, snapshot
from gpufleet.reports.drift_software import CheckModeHost
from gpufleet.ports import Instance

DEFAULT_EXPIRY_WARNING = timedelta(hours=72)
PRODUCTION_RETRIES = {"mode": "adaptive", "max_attempts": 10}  # botocore: throttling-aware client-side rate limiting
FACT_TASK = "Read the gpufleet fact"  # playbooks/roles/node_facts/tasks/main.yml
NO_CHANGES_EXPECTED = "no changes were expected"  # the CLI's error text for --expect-no-changes


# ------------------------------------------------------------------ the Protocols

class Fleet(Protocol):
    def inventory(self) -> Mapping[str, Instance]:
        """Every slot that has an instance now."""
        ...


class PulumiChanges(Protocol):
    def preview(self) -> list[StepView]:
        """Code vs state: the steps of a preview that expects no changes."""
        ...

    def refresh(self) -> list[StepView]:
        """Cloud vs state: the steps of a refresh preview (nothing written)."""
        ...

    def export(self) -> Mapping[str, Any]:
        """The stack's state (`pulumi stack export`, secrets left encrypted)."""
        ...


class CloudScanner(Protocol):
    def scan(self, state: StateView, reservation_ids: Sequence[str]) -> CloudScan: ...


class NodeSoftware(Protocol):
    def collect(self, instances: Sequence[Instance]) -> tuple[dict[str, NodeFacts], dict[str, CheckModeHost] | None]:
        """Facts per slot, and the check-mode result per slot (None where check mode cannot run)."""
        ...


class Baselines(Protocol):
    def current(self) -> PerfSnapshot | None: ...
    def history(self) -> list[PerfSnapshot]: ...
    def record(self, snap: PerfSnapshot) -> None: ...


@dataclass
class Sources:
    """Everything one stack's reports read; built by `gpufleet.sim.drift` or `real_sources`."""

    fleet: Fleet
    pulumi: PulumiChanges
    scanner: CloudScanner
    software: NodeSoftware
    baselines: Baselines


# ------------------------------------------------------------------ Pulumi (Automation API)

def step_view(meta: Any) -> StepView:
    """An Automation API StepEventMetadata as the pure layer reads it."""
    old, new = meta.old, meta.new
    return StepView(op=meta.op.value, urn=meta.urn, type=meta.type, diffs=tuple(meta.diffs or ()),
                    detailed={k: (v.diff_kind.value, bool(v.input_diff)) for k, v in (meta.detailed_diff or {}).items()},
                    old_inputs=(old.inputs or {}) if old else {}, old_outputs=(old.outputs or {}) if old else {},
                    new_inputs=(new.inputs or {}) if new else {}, new_outputs=(new.outputs or {}) if new else {})


class _Steps:
    """on_event: resource steps and error diagnostics of one engine run."""

    def __init__(self) -> None:
        self.steps: list[StepView] = []
        self.errors: list[str] = []

    def __call__(self, event: Any) -> None:
        d = event.diagnostic_event
        if d is not None and d.severity == "error":
            self.errors.append(" ".join(d.message.split()))
        for kind in (event.resource_pre_event, event.res_outputs_event):
            if kind is not None:
                self.steps.append(step_view(kind.metadata))


class AutomationPulumi:
    """`PulumiChanges` over the stack the rollout's provisioner selects (same project root, backend).

    `select` returns the Automation API Stack; it is called once, on first use."""

    def __init__(self, select: Callable[[], Any]) -> None:
        self._select = select
        self._stack: Any = None

    @property
    def stack(self) -> Any:
        if self._stack is None:
            self._stack = self._select()
        return self._stack

    def preview(self) -> list[StepView]:
        from pulumi import automation as auto

        seen = _Steps()
        try:
            self.stack.preview(expect_no_changes=True, on_event=seen, color="never", suppress_progress=True, diff=False)
        except auto.errors.CommandError as exc:
            # --expect-no-changes fails the run when there are changes: that is the answer, not an
            # error; any other error diagnostic (a program exception, no credentials) is.
            others = [e for e in seen.errors if NO_CHANGES_EXPECTED not in e]
            if others or not (seen.steps and (seen.errors or NO_CHANGES_EXPECTED in str(exc))):
                raise ExternalCommandFailed("pulumi preview --expect-no-changes",
                                            _tail("; ".join(others) or str(exc))) from None
        return seen.steps

    def refresh(self) -> list[StepView]:
        from pulumi import automation as auto

        seen = _Steps()
        try:
            self.stack.refresh(preview_only=True, on_event=seen, color="never", suppress_progress=True,
                               show_secrets=False)
        except auto.errors.CommandError as exc:
            raise ExternalCommandFailed("pulumi refresh --preview-only", _tail("; ".join(seen.errors) or str(exc))) from None
        return seen.steps

    def export(self) -> Mapping[str, Any]:
        """Through the plain CLI call: the Automation API's export_stack shows secrets."""
        from pulumi import automation as auto

        try:
            return json.loads(self.stack._run_pulumi_cmd_sync(["stack", "export"]).stdout)
        except auto.errors.CommandError as exc:
            raise ExternalCommandFailed("pulumi stack export", _tail(str(exc))) from None


# ------------------------------------------------------------------ boto3

def ec2_client(region: str, retries: Mapping[str, Any] = PRODUCTION_RETRIES, **kw: Any) -> Any:
    """The scan's EC2 client; tests pass `retries={"max_attempts": 1}` and a moto endpoint."""
    import boto3
    from botocore.config import Config

    return boto3.client("ec2", region_name=region, config=Config(retries=dict(retries)), **kw)


def _aws(fn: Callable[..., Any], **kw: Any) -> Any:
    """One boto3 call (a bound client method: the IAM policy test finds it in the syntax tree)."""
    from botocore.exceptions import BotoCoreError, ClientError

    operation = getattr(fn, "__name__", "call")
    try:
        return fn(**kw)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise ExternalCommandFailed(f"AWS ec2 {operation}", f"{err.get('Code', 'Unknown')}: "
                                                            f"{err.get('Message', exc)}") from None
    except BotoCoreError as exc:
        raise ExternalCommandFailed(f"AWS ec2 {operation}", f"{type(exc).__name__}: {exc}") from None


def _pages(fn: Callable[..., Any], key: str, **kw: Any) -> list[dict]:
    """Every item of a paginated Describe call (NextToken followed by hand: Stubber-friendly)."""
    out: list[dict] = []
    token = None
    while True:
        page = _aws(fn, **kw, **({"NextToken": token} if token else {}))
        out.extend(page.get(key) or [])
        token = page.get("NextToken")
        if not token:
            return out


LIVE_STATES = ["pending", "running", "stopping", "stopped"]
# DescribeLaunchTemplateVersions' errors for a template or version that no longer exists
TEMPLATE_GONE = ("InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.VersionNotFound",
                 "InvalidLaunchTemplateName.NotFoundException")
RESERVATION_GONE = ("InvalidCapacityReservationId.NotFound",)


class Ec2Scanner:
    """`CloudScanner` over boto3: instances by stack tag, subnet and placement group; the stack's
    security groups; the launch-template versions its instances came from; its reservations."""

    def __init__(self, ec2: Any, stack: str) -> None:
        self.ec2 = ec2
        self.stack = stack

    def scan(self, state: StateView, reservation_ids: Sequence[str]) -> CloudScan:
        return CloudScan(instances=self._instances(state), rules=self._rules(state),
                         templates=self._templates(state), reservations=self._reservations(reservation_ids))

    def _instances(self, state: StateView) -> dict[str, CloudInstance]:
        queries: list[tuple[str, dict[str, Any]]] = [("tag", {"Name": f"tag:{t.STACK}", "Values": [self.stack]})]
        if state.subnets:
            queries.append(("subnet", {"Name": "subnet-id", "Values": sorted(state.subnets)}))
        if state.placement_groups:
            queries.append(("placement group", {"Name": "placement-group-name", "Values": sorted(state.placement_groups)}))
        found: dict[str, tuple[dict, list[str]]] = {}
        for why, flt in queries:
            for reservation in _pages(self.ec2.describe_instances, "Reservations",
                                      Filters=[flt, {"Name": "instance-state-name", "Values": LIVE_STATES}]):
                for i in reservation.get("Instances") or []:
                    found.setdefault(i["InstanceId"], (i, []))[1].append(why)
        out = {}
        for iid, (i, reasons) in found.items():
            out[iid] = CloudInstance(
                id=iid, state=(i.get("State") or {}).get("Name", "unknown"), instance_type=i.get("InstanceType", ""),
                image_id=i.get("ImageId", ""), subnet_id=i.get("SubnetId"),
                placement_group=(i.get("Placement") or {}).get("GroupName") or None,
                tags={x["Key"]: x["Value"] for x in i.get("Tags") or []}, matched_by=tuple(reasons))
        return out

    def _rules(self, state: StateView) -> dict[str, tuple]:
        if not state.security_groups:
            return {}
        groups = _pages(self.ec2.describe_security_groups, "SecurityGroups",
                        Filters=[{"Name": "group-id", "Values": sorted(state.security_groups)}])
        return {g["GroupId"]: ec2_rules(g) for g in groups}

    def _templates(self, state: StateView) -> dict[tuple[str, str], TemplateVersion | None]:
        """(template id, version as the state names it) -> its data; None when EC2 no longer has it
        (a template or version deleted by hand is a finding, not a failed scan)."""
        wanted: dict[str, set[str]] = {}
        for m in state.instances.values():
            if m.launch_template_id and m.launch_template_version:
                wanted.setdefault(m.launch_template_id, set()).add(m.launch_template_version)
        out: dict[tuple[str, str], TemplateVersion | None] = {}
        for lt_id, versions in sorted(wanted.items()):
            # numbered versions in one call; an alias ($Latest, $Default) on its own, so the answer is its own
            calls = [sorted(v for v in versions if not v.startswith("$"))] + [[v] for v in sorted(versions)
                                                                              if v.startswith("$")]
            for asked in (c for c in calls if c):
                try:
                    found = _pages(self.ec2.describe_launch_template_versions, "LaunchTemplateVersions",
                                   LaunchTemplateId=lt_id, Versions=asked)
                except ExternalCommandFailed as exc:
                    if not exc.detail.startswith(TEMPLATE_GONE):
                        raise
                    found = []
                for v in found:
                    data = v.get("LaunchTemplateData") or {}
                    number = str(v.get("VersionNumber"))
                    tv = TemplateVersion(id=lt_id, version=number, instance_type=data.get("InstanceType"),
                                         image_id=data.get("ImageId"))
                    out[(lt_id, asked[0] if asked[0].startswith("$") else number)] = tv
                for version in asked:
                    out.setdefault((lt_id, version), None)
        return out

    def _reservations(self, ids: Sequence[str]) -> tuple[Reservation, ...]:
        """The stack's reservations; one EC2 does not know (any more) is state `not-found` (a finding),
        asked one by one only when the batch call refuses the whole list for it."""
        if not ids:
            return ()
        try:
            items = self._describe_reservations(list(ids))
        except ExternalCommandFailed as exc:
            if not exc.detail.startswith(RESERVATION_GONE):
                raise
            items = []
            for rid in ids:
                try:
                    items += self._describe_reservations([rid])
                except ExternalCommandFailed as one:
                    if not one.detail.startswith(RESERVATION_GONE):
                        raise
                    items.append({"CapacityReservationId": rid, "State": "not-found"})
        return tuple(Reservation(id=r["CapacityReservationId"], state=r.get("State", "unknown"),
                                 reservation_type=r.get("ReservationType", "default"),
                                 instance_type=r.get("InstanceType", "?"), total=int(r.get("TotalInstanceCount", 0)),
                                 end_date=r.get("EndDate")) for r in items)

    def _describe_reservations(self, ids: list[str]) -> list[dict]:
        return _pages(self.ec2.describe_capacity_reservations, "CapacityReservations", CapacityReservationIds=ids)


# ------------------------------------------------------------------ ansible-runner

def facts_from_events(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str | None]]:
    """host -> the `gpufleet` fact's versions, from a run's job events (the node_facts setup task)."""
    out = {}
    for e in events:
        if e.get("event") != "runner_on_ok":
            continue
        data = e.get("event_data") or {}
        fact = (((data.get("res") or {}).get("ansible_facts") or {}).get("ansible_local") or {}).get("gpufleet")
        if data.get("host") and isinstance(fact, Mapping) and isinstance(fact.get("versions"), Mapping):
            out[data["host"]] = dict(fact["versions"])
    return out


def read_job_events(private_data_dir: Path, ident: str = "run") -> list[dict]:
    folder = Path(private_data_dir) / "artifacts" / ident / "job_events"
    events = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            events.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError):
            continue  # a partly written event of a killed run: the others still count
    return events


class AnsibleSoftware:
    """`NodeSoftware` over the stack's `AnsibleExecutor`: one `site.yml --check --diff` run; its
    changed tasks per host, and the node_facts fact each host reported in the same run."""

    def __init__(self, executor: Callable[[], Any]) -> None:
        self._executor = executor  # -> gpufleet.configure.executor.AnsibleExecutor (built on first use)

    def collect(self, instances: Sequence[Instance]) -> tuple[dict[str, NodeFacts], dict[str, CheckModeHost]]:
        ex = self._executor()
        facts: dict[str, NodeFacts] = {}
        hosts: dict[str, CheckModeHost] = {}
        nodes = []
        for i in instances:
            node = ex._node(i)  # the rollout's own inventory entry for the instance
            if isinstance(node, str):
                facts[i.slot] = NodeFacts(i.slot, None, node)
                hosts[i.slot] = CheckModeHost(i.slot, "unreachable", message=node)
            else:
                nodes.append(node)
        if not nodes:
            return facts, hosts
        result = ex.runner.run(nodes, ex.connection, {**ex.context, **ex.site_vars}, playbook="site.yml", check=True,
                               run_id=f"drift-check-{os.urandom(5).hex()}")
        reported = facts_from_events(read_job_events(result.private_data_dir))
        for slot, r in result.hosts.items():
            hosts[slot] = CheckModeHost(slot, r.verdict.value, tuple(dict.fromkeys(r.changed)), r.message)
            if slot in reported:
                facts[slot] = NodeFacts(slot, reported[slot])
            else:
                why = r.message if r.verdict.value != "ok" else "the node reported no gpufleet fact (node_facts not applied?)"
                facts[slot] = NodeFacts(slot, None, f"{r.verdict.value}: {why}")
        return facts, hosts


# ------------------------------------------------------------------ stored baselines

class StoredBaselines:
    """`Baselines` from `<state_dir>/records/*.json` and `baselines/communication.json` (what the
    rollout writes), with the history of snapshots in `baselines/history.jsonl`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.history_path = self.state_dir / "baselines" / "history.jsonl"

    def current(self) -> PerfSnapshot | None:
        records = []
        for path in sorted((self.state_dir / "records").glob("*.json")):
            records.append(_read_json(path))
        comm_path = self.state_dir / "baselines" / "communication.json"
        comm = _read_json(comm_path) if comm_path.exists() else None
        return snapshot(records, comm)

    def history(self) -> list[PerfSnapshot]:
        if not self.history_path.exists():
            return []
        out = []
        lines = self.history_path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(PerfSnapshot.model_validate_json(line))
            except ValueError as exc:
                if n == len(lines):
                    continue  # a torn last line (a killed run): that snapshot is recorded again next time
                raise ExternalCommandFailed(f"reading {self.history_path}", f"line {n}: {exc}") from None
        return out

    def record(self, snap: PerfSnapshot) -> None:
        """Append the snapshot once (fsync'd); a snapshot already in the history is not repeated."""
        if not is_new(snap, self.history()):
            return
        self.history_path.parent.mkdir(parents=True, exist_ok=True)
        if self.history_path.exists():  # cut a torn last line first, or it would end up mid-file
            data = self.history_path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open(self.history_path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
        fd = os.open(self.history_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (snap.model_dump_json() + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ExternalCommandFailed(f"reading {path}", str(exc)) from None


def _tail(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]


# ------------------------------------------------------------------ the real stack

class PulumiFleet:
    """`Fleet` from the stack's state: the GPU node instances it holds (as the rollout reads them)."""

    def __init__(self, pulumi: AutomationPulumi) -> None:
        self.pulumi = pulumi

    def inventory(self) -> Mapping[str, Instance]:
        from gpufleet.rollout.pulumi_provisioner import nodes_from_state

        return nodes_from_state(self.pulumi.export())


def real_sources(spec: Any, project: Any, stack: str, *, pulumi_command: Any = None, ec2: Any = None) -> Sources:
    """A real stack's sources: its Pulumi stack (selected the way the rollout's provisioner does, on
    first use, so a missing CLI fails the layers that need it and not the others), boto3 in its
    region with adaptive retries, its Ansible executor, its stored baselines."""

    def select() -> Any:
        from pulumi import automation as auto

        from gpufleet.rollout.pulumi_provisioner import PulumiProvisioner

        try:
            return PulumiProvisioner.for_stack(spec, project, stack, pulumi_command=pulumi_command).stack
        except (auto.errors.CommandError, OSError, RuntimeError, ValueError) as exc:  # no CLI, no stack, no backend
            raise ExternalCommandFailed(f"pulumi stack select {stack}", _tail(str(exc))) from None

    def executor() -> Any:
        from gpufleet.configure.executor import stack_executor
        from gpufleet.configure.inventory import SshConnection

        user = "ec2-user" if spec.image.os == "al2023" else "ubuntu"  # the AMI families' default login (as wiring)
        return stack_executor(spec, project, stack, SshConnection(user=user))

    pulumi = AutomationPulumi(select)
    return Sources(fleet=PulumiFleet(pulumi), pulumi=pulumi,
                   scanner=Ec2Scanner(ec2 or ec2_client(spec.cluster.region), stack),
                   software=AnsibleSoftware(executor), baselines=StoredBaselines(project.state_dir(stack)))
