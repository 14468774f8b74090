"""The real Provisioner: the stack's own Pulumi program, driven through the Automation API.

`provision(k, slots)` raises `gpufleet:rollout.targetBatch` to k (path-aware `config set --path`,
never lowered: the program refuses a shrink) and runs `up` with the engine's event stream feeding
a progress callback; the instances come from the stack's `nodes` output after a successful
update. A failed update leaves that output as it was (pulumi/pulumi#14621), so what came up
then is read from the stack's state, and the engine's diagnostics say why the rest did not.

`provision_base()` runs before batch 1: target 0 when the stack has none (the base and the
storage base check's clients, no GPU node), then the clients from the `storageClients` output.

Failures are typed (`ProvisioningError` with `retryable` and the slots): a concurrent update or
API throttling is retried here a bounded number of times with exponential backoff and jitter
(`up` is idempotent: it converges on the same program); a capacity shortfall
(InsufficientInstanceCapacity and kin) is not an exception when some instances came up: the
slots without an instance return in `ProvisionResult.shortfall` and the orchestrator asks again.
A quota or any other error stops with the engine's own message.

`replace(slot, action)` takes the bad instance out of service with boto3 (stop it and report it
to EC2 with reason codes, or terminate it), forgets it in the state (`pulumi state delete
--force`: every deployed instance is protected, and a stopped-and-reported one must outlive the
stack's claim on it), then runs an `up --target` on the slot's URN: the program registers the
slot again and the engine creates a new instance with the same name, tagged with its replacement
generation (`gpufleet:rollout.slotGenerations["<slot>"]`, set first: one past the old instance's tag). Every step is safe to run
again after a crash: the state is the truth, and a slot with no instance in it is just created.

`reimage(slots, ami)` moves live slots to another image the program's own way: it sets the
per-slot override `gpufleet:image.slotAmis["<slot>"]` for the slots not yet on `ami` (one
path-aware `config set-all`), then runs an `up --target` on their URNs; the program unprotects
exactly those instances and lets their image change, so the engine deletes each and creates its
replacement from `ami`, and every other slot stays as it is. A slot the state already shows on
`ami` is neither set nor targeted again, which makes a repeated call (a resumed upgrade) a no-op.

Updates are serialized by a lock: the orchestrator provisions the next batch in a worker thread
while it replaces nodes of the current one, and Pulumi allows one update at a time.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from gpufleet import tagging as t
from gpufleet.cloud.pulumi_stack import output_values, select_stack
from gpufleet.errors import ConfigError, ProvisioningError
from gpufleet.plan.model import ClusterPlan, NodeSlot
from gpufleet.rollout import pending_creates as pc
from gpufleet.project import Project
from gpufleet.ports import Instance, ProvisionResult, ReplaceAction
from gpufleet.spec import AMI_PATTERN, ClusterSpec

log = logging.getLogger(__name__)

TARGET_KEY = "gpufleet:rollout.targetBatch"
LAYOUT_KEY = "gpufleet:rollout.layout"  # gpufleet.plan.resize.encode_layout, once a cluster was resized
SLOT_AMIS_KEY = "gpufleet:image.slotAmis"  # + ["<slot>"], path-aware: the stack's image key stays one object
SLOT_GENERATIONS_KEY = "gpufleet:rollout.slotGenerations"  # + ["<slot>"]: the new instance's generation tag
NODES_OUTPUT = "nodes"
CLIENTS_OUTPUT = "storageClients"  # the storage base check's clients (gpufleet.cloud.storage_clients)
INSTANCE_TYPE = "aws:ec2/instance:Instance"
NODE_PARENT_TYPE = "gpufleet:compute:Compute"  # the Compute component parents every GPU instance
CAPACITY_CODES = ("InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
                  "InsufficientReservedInstanceCapacity", "ReservationCapacityExceeded",
                  "InsufficientCapacityOnHost")
THROTTLING_CODES = ("RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException")
REPORT_REASONS = ("performance-other",)  # EC2 ReportInstanceStatus: the closest code for a failed GPU gate
REPLACED_TAG = "gpufleet.io/replaced"


# --- progress and the engine's event stream (pure) ----------------------------------------------

@dataclass(frozen=True)
class ProvisionProgress:
    """One step of an update as the engine reports it; `slot` is set for GPU node instances."""

    urn: str
    type: str
    op: str
    status: str  # started | done | failed
    slot: str | None = None
    message: str | None = None


ProgressCallback = Callable[[ProvisionProgress], None]


def _log_progress(p: ProvisionProgress) -> None:
    log.info("%s %s %s%s", p.status, p.op, p.slot or p.urn, f": {p.message}" if p.message else "")


def logical_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def instance_from_state(outputs: Mapping[str, Any]) -> Instance | None:
    """A GPU node from an instance's outputs (state or event); None for other instances (the Slurm head)."""
    tags = outputs.get("tags") or {}
    if tags.get(t.ROLE) != "gpu-node" or not outputs.get("id") or not tags.get(t.SLOT):
        return None
    return Instance(slot=tags[t.SLOT], instance_id=str(outputs["id"]), batch=int(tags[t.BATCH]),
                    block=int(tags[t.BLOCK]), private_ip=outputs.get("privateIp"), generation=t.generation_of(tags))


@dataclass
class UpDigest:
    """What one update's events said: instances created, and error diagnostics by resource."""

    created: dict[str, Instance] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)  # URN ('' for the stack) -> messages

    def error_text(self) -> str:
        return "\n".join(m for ms in self.errors.values() for m in ms)

    def slot_errors(self) -> dict[str, str]:
        return {logical_name(urn): " ".join(ms).strip() for urn, ms in self.errors.items()
                if urn and f"{INSTANCE_TYPE}::" in urn}


class EventCollector:
    """`on_event` for `Stack.up`: folds engine events into an UpDigest and reports progress."""

    def __init__(self, progress: ProgressCallback) -> None:
        self.digest = UpDigest()
        self._progress = progress

    def __call__(self, event: Any) -> None:
        if event.diagnostic_event is not None and event.diagnostic_event.severity == "error":
            d = event.diagnostic_event
            self.digest.errors.setdefault(d.urn or "", []).append(d.message.strip())
            return
        for kind, status in ((event.resource_pre_event, "started"), (event.res_outputs_event, "done"),
                             (event.res_op_failed_event, "failed")):
            if kind is None:
                continue
            meta = kind.metadata
            slot = None
            if meta.type == INSTANCE_TYPE:
                state = meta.new or meta.old
                node = instance_from_state(state.outputs or {}) if state is not None and state.outputs else None
                slot = node.slot if node is not None else logical_name(meta.urn)
                if status == "done" and node is not None and meta.op.value in ("create", "replace", "create-replacement"):
                    self.digest.created[node.slot] = node
            message = (" ".join(self.digest.errors.get(meta.urn, [])) or None) if status == "failed" else None
            self._progress(ProvisionProgress(urn=meta.urn, type=meta.type, op=meta.op.value, status=status,
                                             slot=slot, message=message))


def classify(text: str) -> str | None:
    """'capacity', 'throttling' or None, from the engine's diagnostics and the CLI's stderr."""
    if any(code in text for code in CAPACITY_CODES):
        return "capacity"
    if any(code in text for code in THROTTLING_CODES):
        return "throttling"
    return None


def nodes_from_output(value: Any) -> dict[str, Instance]:
    """The program's `nodes` output ({batch: [{slot, instanceId, privateIp, batch, block, generation}]})
    by slot; a row without `generation` (a stack last updated before it) reads as 0."""
    out: dict[str, Instance] = {}
    for rows in (value or {}).values():
        for row in rows:
            out[row["slot"]] = Instance(slot=row["slot"], instance_id=row["instanceId"], batch=int(row["batch"]),
                                        block=int(row["block"]), private_ip=row.get("privateIp"),
                                        generation=int(row.get("generation") or 0))
    return out


def clients_from_output(value: Any) -> dict[str, Instance]:
    """The program's `storageClients` output ({name: {instanceId, privateIp}}) as Instances of no
    batch or block (0): hosts the executor reaches like nodes, never slots of the plan."""
    return {name: Instance(slot=name, instance_id=row["instanceId"], batch=0, block=0, private_ip=row.get("privateIp"))
            for name, row in sorted((value or {}).items())}


def slot_ami_key(slot: str) -> str:
    """The `config set --path` key of one slot's image override (quoted: slot names hold dashes)."""
    return f'{SLOT_AMIS_KEY}["{slot}"]'


def slot_generation_key(slot: str) -> str:
    """The `config set --path` key of the replacement generation the program tags a slot's instance with."""
    return f'{SLOT_GENERATIONS_KEY}["{slot}"]'


def next_generation(old: Instance | None, configured: int | None) -> int:
    """The generation a slot's replacement is tagged with: one past the instance it replaces; when the
    state has forgotten that instance already (a crash after `state delete`), what the config was set
    to before it was forgotten (0 for a slot that never had one). Pure, so a resumed call tags alike."""
    if old is not None:
        return old.generation + 1
    return configured or 0


def images_from_state(deployment: Mapping[str, Any]) -> dict[str, str | None]:
    """slot -> the `ami` of its GPU node instance in a `pulumi stack export` document."""
    out: dict[str, str | None] = {}
    for res in (deployment.get("deployment") or {}).get("resources") or []:
        if res.get("type") == INSTANCE_TYPE and not res.get("delete"):
            outputs = res.get("outputs") or {}
            node = instance_from_state({**outputs, "id": res.get("id")})
            if node is not None:
                out[node.slot] = outputs.get("ami")
    return out


def nodes_from_state(deployment: Mapping[str, Any]) -> dict[str, Instance]:
    """GPU node instances in a `pulumi stack export` document, by slot."""
    out: dict[str, Instance] = {}
    for res in (deployment.get("deployment") or {}).get("resources") or []:
        if res.get("type") == INSTANCE_TYPE and not res.get("delete"):
            node = instance_from_state({**(res.get("outputs") or {}), "id": res.get("id")})
            if node is not None:
                out[node.slot] = node
    return out


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter (AWS's advice for throttled callers)."""

    attempts: int = 4
    base_s: float = 5.0
    cap_s: float = 120.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.cap_s, self.base_s * 2 ** attempt))


# --- the adapter ------------------------------------------------------------------------------------

class Ec2(Protocol):
    """The boto3 EC2 calls `replace` makes (a boto3 client satisfies it)."""

    def report_instance_status(self, **kw: Any) -> Any: ...
    def stop_instances(self, **kw: Any) -> Any: ...
    def terminate_instances(self, **kw: Any) -> Any: ...
    def describe_instances(self, **kw: Any) -> Any: ...
    def create_tags(self, **kw: Any) -> Any: ...


class PulumiProvisioner:
    """The Provisioner port over one Pulumi stack (see the module docstring)."""

    def __init__(self, stack: Any, project_name: str, ec2: Callable[[], Ec2], *,
                 progress: ProgressCallback = _log_progress, retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stack = stack
        self.project_name = project_name
        self._ec2 = ec2
        self._progress = progress
        self._retry = retry
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._clock = clock
        self._lock = threading.Lock()
        self._layout: str | None = None  # the rollout's resized layout, written before every `up`

    @classmethod
    def for_stack(cls, spec: ClusterSpec, project: Project, stack: str, *, pulumi_command: Any = None,
                  ec2: Callable[[], Ec2] | None = None, **kw: Any) -> "PulumiProvisioner":
        """Select `stack` in the project (work_dir = its root, so the CLI reads its Pulumi.yaml, including
        a `backend.url`, and honours PULUMI_BACKEND_URL from the environment like `pulumi` itself)."""
        selected = select_stack(project, stack, pulumi_command)
        region = spec.cluster.region

        def client() -> Ec2:
            import boto3

            return boto3.client("ec2", region_name=region)
        return cls(selected, project.name, ec2 or client, **kw)

    # -- a cluster grown or shrunk by whole blocks (gpufleet.plan.resize) ---------------------------

    def take_layout(self, plan: ClusterPlan) -> None:
        """From now on every `up` runs the program on this (the rollout's effective) plan: its
        `gpufleet:rollout.layout` is written before each update, so the program registers exactly
        the journal's slots in the journal's batches (a grow's new batches after the old ones), and
        drops a shrink's released slots once `terminate` took them out of the state."""
        from gpufleet.plan.resize import encode_layout

        self._layout = encode_layout(plan)

    def terminate(self, slots: Sequence[str]) -> list[str]:
        """A shrink's end: each released slot's instance terminated with boto3 and forgotten in the
        state (`state delete --force`: deployed instances are protected, and only these may go),
        then one `up` on the layout without them (the program drops them from `deployedSlots`).
        Safe to run again: a slot with no instance in the state is skipped. Returns the ids."""
        with self._lock:
            have = self._state_nodes()
            gone = [have[s] for s in slots if s in have]
            for old in gone:
                self._take_out_of_service(old, "terminate", "released by a shrink")
                self.stack._run_pulumi_cmd_sync(["state", "delete", self.instance_urn(old.slot), "--force", "--yes"])
            digest, failure, _ = self._up()
            if failure is not None:
                raise ProvisioningError(f"the update after terminating {len(gone)} released slot(s) failed: "
                                        f"{_tail(digest.error_text() or str(failure))}", retryable=True,
                                        slots=tuple(slots))
            left = [s for s in slots if s in self._state_nodes()]
            if left:
                raise ProvisioningError(f"released slot(s) {', '.join(left[:5])} still have an instance in the state",
                                        slots=tuple(left))
            return [i.instance_id for i in gone]

    # -- Provisioner ------------------------------------------------------------------------------

    def provision(self, batch: int, slots: Sequence[NodeSlot]) -> ProvisionResult:
        with self._lock:
            started = self._clock()
            self._raise_target(batch)
            digest, failure, outputs = self._up()
            if failure is None:
                have = nodes_from_output(_value(outputs.get(NODES_OUTPUT)))
            else:
                have = {**self._state_nodes(), **digest.created}
            return self._result(slots, have, digest, failure, self._clock() - started)

    def replace(self, slot: NodeSlot, action: ReplaceAction, reason: str | None = None) -> Instance:
        if action not in ("stop-and-report", "terminate"):
            raise ProvisioningError(f"unknown replace action {action!r}", slots=(slot.name,))
        with self._lock:
            old = self._state_nodes().get(slot.name)
            urn = self.instance_urn(slot.name)
            # the program tags the new instance with it; set before the old one is forgotten, so a call
            # resumed past the forget finds it in the config (a crash before the forget, then an untargeted
            # `up`, retags the old instance: the count then runs one high, never low)
            configured = None if old is not None else self._configured_generation(slot.name)
            self._set_generation(slot.name, next_generation(old, configured))
            if old is not None:  # not yet forgotten (a crash may have come after this point before)
                self._take_out_of_service(old, action, reason)
                self.stack._run_pulumi_cmd_sync(["state", "delete", urn, "--force", "--yes"])
            digest, failure, _ = self._up(target=[urn])
            new = digest.created.get(slot.name) or self._state_nodes().get(slot.name)
            if new is None or (old is not None and new.instance_id == old.instance_id):
                why = (digest.slot_errors().get(slot.name) or digest.error_text() or
                       (str(failure) if failure else "the update created no instance"))
                raise ProvisioningError(f"slot {slot.name} has no new instance: {why}",
                                        retryable=classify(why) is not None, slots=(slot.name,))
            return new

    def settle_pending_creates(self) -> dict[str, list[str]]:
        """Before the first `up` of a resumed rollout: the state's pending instance creates (an `up`
        killed mid-flight), each slot's instances found in EC2 by its slot tag, those the state never
        recorded terminated, and the state imported back without the pending operations, so the next
        `up` creates the slot's one instance. Returns slot -> the instances terminated."""
        with self._lock:
            state = self._export()
            pending = pc.pending_instance_creates(state)
            if not pending:
                return {}
            ec2 = self._ec2()
            live: dict[str, list[str]] = {}
            for p in pending:
                found = ec2.describe_instances(Filters=[
                    {"Name": f"tag:{t.SLOT}", "Values": [p.slot]},
                    {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}])
                live[p.slot] = [i["InstanceId"] for r in found.get("Reservations", ()) for i in r.get("Instances", ())]
            recorded = [i.instance_id for i in nodes_from_state(state).values()]
            orphans = pc.orphans(pending, live, recorded)
            for slot, ids in orphans.items():
                log.warning("slot %s: instance(s) %s created by an interrupted update and never recorded: "
                            "terminating", slot, ", ".join(ids))
                ec2.terminate_instances(InstanceIds=ids)
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(pc.without_pending(state, [p.urn for p in pending]), f)
            try:
                self.stack._run_pulumi_cmd_sync(["stack", "import", "--file", f.name])
            finally:
                os.unlink(f.name)
            return {p.slot: orphans.get(p.slot, []) for p in pending}

    def provision_base(self) -> Mapping[str, Instance]:
        """`gpufleet.ports.BaseProvisioner`: the base (network, file system, controller, storage
        clients) before any GPU node. A stack with no batch target gets 0, one with a target keeps it
        (never lowered: the program refuses a shrink), and one `up` converges either; the storage
        clients come from its outputs."""
        with self._lock:
            self._raise_target(0)
            digest, failure, outputs = self._up()
            if failure is not None:
                raise ProvisioningError(f"the base of stack {self.stack.name} is not up: "
                                        f"{_tail(digest.error_text() or str(failure))}", retryable=True)
            clients = clients_from_output(_value(outputs.get(CLIENTS_OUTPUT)))
            if not clients:
                raise ProvisioningError(f"stack {self.stack.name} exports no `{CLIENTS_OUTPUT}` after its update: "
                                        "the storage base check has no client to run on")
            return clients

    def storage_clients(self) -> Mapping[str, Instance]:
        """The storage clients as of the last update (read-only, like `inventory`)."""
        return clients_from_output(self.outputs().get(CLIENTS_OUTPUT))

    def inventory(self) -> Mapping[str, Instance]:
        """Read-only, so not serialized: `stack export` reads the last checkpoint, even mid-update."""
        return self._state_nodes()

    # -- gpufleet.daytwo.reimage.Reimager -------------------------------------------------------------

    def images(self) -> Mapping[str, str | None]:
        """slot -> the AMI its instance was launched from, as the state records it."""
        return images_from_state(self._export())

    def reimage(self, slots: Sequence[NodeSlot], ami: str) -> ProvisionResult:
        if not re.fullmatch(AMI_PATTERN, ami):
            raise ConfigError(f"{ami!r} is not an AMI id", field=SLOT_AMIS_KEY, expected="ami- and 8-17 hex digits")
        from pulumi import automation as auto

        with self._lock:
            started = self._clock()
            state = self._export()
            todo = [s for s in slots if images_from_state(state).get(s.name) != ami]
            if todo:
                self.stack.set_all_config({slot_ami_key(s.name): auto.ConfigValue(value=ami) for s in todo}, path=True)
                digest, failure, _ = self._up(target=[self.instance_urn(s.name) for s in todo])
                state = self._export()
                images = images_from_state(state)
                behind = [s.name for s in todo if images.get(s.name) != ami]
                if behind:
                    why = (digest.slot_errors().get(behind[0]) or digest.error_text() or
                           (str(failure) if failure else "the update left them on their old image"))
                    raise ProvisioningError(f"{len(behind)} slot(s) not on {ami} after the update "
                                            f"({', '.join(behind[:5])}): {_tail(why)}",
                                            retryable=classify(why) is not None, slots=tuple(behind))
            have = nodes_from_state(state)
            missing = [s.name for s in slots if s.name not in have]
            if missing:
                raise ProvisioningError(f"no instance in slot(s) {', '.join(missing[:5])}", slots=tuple(missing))
            return ProvisionResult(instances={s.name: have[s.name] for s in slots},
                                   duration_s=self._clock() - started if todo else 0.0)

    def outputs(self) -> dict[str, Any]:
        """The stack's outputs as of its last update (`bucket`, `slurmControllerIp`, ...), plain values.
        Read-only like `inventory`: the configure stage reads them after its batch's update."""
        return output_values(self.stack)

    # -- steps --------------------------------------------------------------------------------------

    def instance_urn(self, slot: str) -> str:
        return f"urn:pulumi:{self.stack.name}::{self.project_name}::{NODE_PARENT_TYPE}${INSTANCE_TYPE}::{slot}"

    def _configured_generation(self, slot: str) -> int | None:
        from pulumi import automation as auto

        try:
            return int(self.stack.get_config(slot_generation_key(slot), path=True).value)
        except (auto.errors.CommandError, ValueError):  # not set: the slot's instances were never replaced
            return None

    def _set_generation(self, slot: str, generation: int) -> None:
        from pulumi import automation as auto

        self.stack.set_config(slot_generation_key(slot), auto.ConfigValue(value=str(generation)), path=True)

    def _raise_target(self, batch: int) -> None:
        """Set the batch target to `batch` unless it is already at least that (a lower one is a shrink)."""
        from pulumi import automation as auto

        try:
            current = int(self.stack.get_config(TARGET_KEY, path=True).value)
        except auto.errors.CommandError:  # not set yet: a fresh stack
            current = None
        except ValueError:
            current = None
        if current is None or current < batch:
            self.stack.set_config(TARGET_KEY, auto.ConfigValue(value=str(batch)), path=True)

    def _up(self, target: list[str] | None = None) -> tuple[UpDigest, Exception | None, Mapping[str, Any]]:
        """`up` with retries for concurrent updates and throttling: the digest, the capacity failure if
        any, and the stack outputs. `continue_on_error`: one slot without capacity must not stop the
        creation of the others."""
        from pulumi import automation as auto

        if self._layout is not None:
            self.stack.set_config(LAYOUT_KEY, auto.ConfigValue(value=self._layout), path=True)
        for attempt in range(self._retry.attempts):
            collector = EventCollector(self._progress)
            try:
                result = self.stack.up(on_event=collector, target=target, color="never", suppress_progress=True,
                                       continue_on_error=True)
                return collector.digest, None, result.outputs
            except auto.errors.ConcurrentUpdateError as exc:
                failure, kind = exc, "concurrent update"
            except auto.errors.CommandError as exc:
                failure, kind = exc, classify(collector.digest.error_text() + "\n" + str(exc))
                if kind != "throttling":
                    return (*self._final(collector.digest, exc, kind), {})
            if attempt + 1 < self._retry.attempts:
                delay = self._retry.delay(attempt, self._rng)
                log.warning("pulumi up: %s; retrying in %.0f s (attempt %d of %d)", kind, delay, attempt + 2,
                            self._retry.attempts)
                self._sleep(delay)
        raise ProvisioningError(
            f"pulumi up of stack {self.stack.name} kept failing ({kind}) after {self._retry.attempts} attempts: "
            f"{_tail(collector.digest.error_text() or str(failure))}", retryable=True)

    def _final(self, digest: UpDigest, exc: Any, kind: str | None) -> tuple[UpDigest, Exception | None]:
        if kind == "capacity":
            return digest, exc
        raise ProvisioningError(f"pulumi up of stack {self.stack.name} failed: "
                                f"{_tail(digest.error_text() or str(exc))}",
                                slots=tuple(sorted(digest.slot_errors())))

    def _result(self, slots: Sequence[NodeSlot], have: Mapping[str, Instance], digest: UpDigest,
                failure: Exception | None, seconds: float) -> ProvisionResult:
        instances = {s.name: have[s.name] for s in slots if s.name in have}
        missing = [s.name for s in slots if s.name not in have]
        reasons = digest.slot_errors()
        if failure is not None and missing and not instances:
            raise ProvisioningError(
                f"no capacity for any of {len(missing)} slot(s) of this request: "
                f"{_tail(reasons.get(missing[0]) or digest.error_text())}", retryable=True, slots=tuple(missing))
        default = "no instance after the update" if failure is None else "no capacity (the update failed before it)"
        shortfall = {s: _tail(reasons.get(s) or default) for s in missing}
        return ProvisionResult(instances=instances, shortfall=shortfall, duration_s=seconds)

    def _state_nodes(self) -> dict[str, Instance]:
        return nodes_from_state(self._export())

    def _export(self) -> dict[str, Any]:
        """The stack's state. Exported without --show-secrets: secrets stay encrypted (the
        Automation API's export_stack always shows them, hence the plain CLI call)."""
        result = self.stack._run_pulumi_cmd_sync(["stack", "export"])
        return json.loads(result.stdout)

    def _take_out_of_service(self, old: Instance, action: ReplaceAction, reason: str | None) -> None:
        ec2 = self._ec2()
        ids = [old.instance_id]
        if action == "stop-and-report":
            what = f"gpufleet: slot {old.slot} failed its gates" + (f": {reason}" if reason else "")
            ec2.report_instance_status(Instances=ids, Status="impaired", ReasonCodes=list(REPORT_REASONS),
                                       Description=what[:255])
            ec2.stop_instances(InstanceIds=ids)
            ec2.create_tags(Resources=ids, Tags=[{"Key": REPLACED_TAG, "Value": "stopped-and-reported"}])
        else:
            ec2.terminate_instances(InstanceIds=ids)


def _value(output: Any) -> Any:
    return getattr(output, "value", output)


def _tail(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]
