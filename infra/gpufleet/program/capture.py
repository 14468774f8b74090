"""Run the real Pulumi program offline under `pulumi.runtime.set_mocks` and record it.

No CLI, no credentials: a recording monitor keeps every registration (type, name, camelCase
inputs, mocked outputs, parent, options) and the stack's exports; the mocks answer ids and
attributes deterministically (private IPs come from the compute subnet by slot index), so the
preview, the policy tests, the snapshots and the simulator all see the same graph.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pmocks
from pulumi.runtime import rpc, settings

from gpufleet import tagging as t
from gpufleet.program.cluster import Cluster, run_program
from gpufleet.cloud.staging import DEPLOYED_OUTPUT, LEGACY_IMAGES_OUTPUT
from gpufleet.plan import build_plan
from gpufleet.plan.model import ClusterPlan
from gpufleet.spec import ClusterSpec, load_stack, pulumi_config_from_raw

PROJECT = "gpufleet"
MOCK_ACCOUNT = "123456789012"
SERVICE_CIDR = "172.20.0.0/16"


@dataclass(frozen=True)
class Registration:
    type: str
    name: str
    inputs: dict[str, Any]  # camelCase, as the engine sends them to providers and policies
    outputs: dict[str, Any]  # the mocked state, with `id` for custom resources (as the bridge reports it)
    parent: str | None  # the parent's URN
    options: dict[str, Any] = field(default_factory=dict)  # protect, ignoreChanges, dependsOn, provider
    urn: str = ""


@dataclass
class Capture:
    stack: str
    spec: ClusterSpec
    plan: ClusterPlan
    registrations: list[Registration]
    outputs: dict[str, Any]

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def named(self, name: str) -> Registration:
        return next(r for r in self.registrations if r.name == name)


def _digest(*parts: str, n: int = 17) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


class GpufleetMocks(pulumi.runtime.Mocks):
    """Deterministic answers for the resource types and invokes the program uses."""

    def __init__(self, plan: ClusterPlan, stack: str, recorded_outputs: dict[str, Any] | None) -> None:
        self.plan = plan
        self.stack = stack
        self.recorded = recorded_outputs  # what the mocked StackReference answers (None: a fresh stack)
        self.ips = dict(zip((slot.name for slot in plan.nodes), _host_ips(plan.network.compute.cidr)))
        self.management_ips = _host_ips(plan.network.management.cidr)
        self.client_ips = _top_ips(plan.network.compute.cidr)  # storage clients: compute subnet, from its end
        # the engine registers resources from a thread pool: two instances drawing from one generator at
        # once is "ValueError: generator already executing" (seen under load, the storage clients)
        self._ips_lock = threading.Lock()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        typ, name, inputs = args.typ, args.name, dict(args.inputs)
        rid = f"{typ.split(':')[-1].lower()}-{_digest(self.stack, typ, name)}"
        out = dict(inputs)
        if typ == "pulumi:pulumi:StackReference":
            return inputs.get("name", name), {"name": inputs.get("name", name), "outputs": dict(self.recorded or {}),
                                              "secretOutputNames": []}
        out.setdefault("arn", f"arn:aws:{typ.split(':')[1].split('/')[0]}:{self.plan.region}:{MOCK_ACCOUNT}:{rid}")
        out.setdefault("tagsAll", inputs.get("tags", {}))
        if typ == "aws:ec2/instance:Instance":
            client = (inputs.get("tags") or {}).get(t.ROLE) == "storage-client"
            # GPU slots by index; the Slurm head node in the management subnet
            with self._ips_lock:
                ip = self.ips.get(name) or next(self.client_ips if client else self.management_ips)
                self.ips[name] = ip
            out.update(privateIp=ip, privateDns=f"ip-{ip.replace('.', '-')}.ec2.internal",
                       instanceState="running", id=f"i-{_digest(self.stack, name)}")
            return out["id"], out
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            out.update(latestVersion=1, defaultVersion=1)
        elif typ in ("aws:ec2/placementGroup:PlacementGroup", "aws:iam/instanceProfile:InstanceProfile"):
            out.setdefault("name", name)  # auto-named by the provider; instances refer to a profile by name
        elif typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            out.update(dnsName=f"{rid}.fsx.{self.plan.region}.amazonaws.com", mountName=_digest(name, n=8))
        elif typ == "aws:s3/bucket:Bucket":
            out.setdefault("bucket", f"{inputs.get('bucketPrefix', name)}{_digest(name, n=8)}")
            out["arn"] = f"arn:aws:s3:::{out['bucket']}"
        elif typ == "aws:eks/cluster:Cluster":
            out.update(endpoint=f"https://{_digest(name, n=32).upper()}.gr7.{self.plan.region}.eks.amazonaws.com",
                       certificateAuthority={"data": "TU9DSy1DQQ=="},
                       kubernetesNetworkConfig={"serviceIpv4Cidr": SERVICE_CIDR, "ipFamily": "ipv4"},
                       # the group EKS creates for the control plane and managed nodes
                       vpcConfig={**(inputs.get("vpcConfig") or {}),
                                  "clusterSecurityGroupId": f"sg-{_digest(self.stack, name, 'cluster')}"})
        elif typ == "aws:iam/role:Role":
            out["arn"] = f"arn:aws:iam::{MOCK_ACCOUNT}:role/{name}"
            out.setdefault("name", name)
        return rid, out

    def call(self, args: pulumi.runtime.MockCallArgs):
        if args.token == "aws:ssm/getParameter:getParameter":
            name = args.args["name"]
            return {"name": name, "type": "String", "value": f"ami-{_digest('ami', name)}", "id": name,
                    "arn": f"arn:aws:ssm:{self.plan.region}:{MOCK_ACCOUNT}:parameter{name}", "version": 1,
                    "insecureValue": f"ami-{_digest('ami', name)}"}
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return self._zones(args.args)
        return {}


    def _zones(self, query: dict[str, Any]) -> dict[str, Any]:
        """The region's zones as EC2 lists them, an opted-in Local Zone first, filtered by the query's
        `excludeZoneIds` and `opt-in-status` filter as DescribeAvailabilityZones would."""
        region = self.plan.region
        zones = [(f"{region}-lax-1a", f"{region[:2]}{region.split('-')[1][0]}{region[-1]}-lax1-az1", "opted-in")]
        zones += [(f"{region}{c}", f"{region[:2]}{region.split('-')[1][0]}{region[-1]}-az{i + 1}", "opt-in-not-required")
                  for i, c in enumerate("abcd")]
        excluded = set(query.get("excludeZoneIds") or [])
        opt_in = next((f.get("values") for f in query.get("filters") or [] if f.get("name") == "opt-in-status"), None)
        kept = [z for z in zones if z[1] not in excluded and (opt_in is None or z[2] in opt_in)]
        return {"names": [z[0] for z in kept], "zoneIds": [z[1] for z in kept], "id": region,
                "groupNames": [region]}


class RecordingMonitor(pmocks.MockMonitor):
    """Keeps each registration with its options, which `Mocks.new_resource` never sees."""

    def __init__(self, mocks: GpufleetMocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.stack_outputs: dict[str, Any] = {}
        self._stack_urn: str | None = None

    def RegisterResource(self, request):  # noqa: N802 (gRPC name)
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            self._stack_urn = response.urn
            return response
        registered = self.resources[response.urn]
        inputs = rpc.deserialize_properties(request.object)
        options = {"protect": bool(request.protect), "ignoreChanges": list(request.ignoreChanges),
                   "deleteBeforeReplace": bool(request.deleteBeforeReplace),
                   "dependsOn": sorted(request.dependencies), "custom": bool(request.custom)}
        outputs = {**_plain(registered.state), "id": registered.id} if request.custom else _plain(registered.state)
        self.registrations.append(Registration(request.type, request.name, _plain(inputs), outputs,
                                               request.parent or None, options, response.urn))
        return response

    def ReadResource(self, request):  # noqa: N802 (gRPC name)
        response = super().ReadResource(request)
        self.registrations.append(Registration(request.type, request.name, _plain(rpc.deserialize_properties(
            request.properties)), {}, request.parent or None, {"read": True}, response.urn))
        return response

    def RegisterResourceOutputs(self, request):  # noqa: N802 (gRPC name)
        if request.urn == self._stack_urn:
            self.stack_outputs = _plain(rpc.deserialize_properties(request.outputs))
        return super().RegisterResourceOutputs(request)


def _host_ips(cidr: str):
    """A subnet's usable addresses in order, after the ones AWS reserves (.0-.3)."""
    hosts = ipaddress.IPv4Network(cidr).hosts()
    for _ in range(3):  # .1-.3: router, DNS, future use
        next(hosts)
    return (str(ip) for ip in hosts)


def _top_ips(cidr: str):
    """A subnet's usable addresses from its end down (AWS reserves the broadcast address)."""
    net = ipaddress.IPv4Network(cidr)
    return (str(net.broadcast_address - i) for i in range(1, net.num_addresses - 4))


def _plain(value: Any) -> Any:
    """Deserialized properties as plain JSON-able data (secrets unwrapped, unknowns as None)."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:  # noqa: SLF001
            return _plain(value.get("value"))
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire format has only doubles; counts and indexes read back as ints
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.loads(json.dumps(value, default=str))


def capture_program(spec_or_stack: ClusterSpec | str, *, stack: str | None = None, target_batch: int | None = None,
                    recorded_outputs: dict[str, Any] | None = None, recorded_batches: int | None = None,
                    recorded_images: dict[str, str] | None = None,
                    overrides: dict[str, Any] | None = None) -> Capture:
    """Run the real program (`program.run_program`) under mocks; return every registration and the exports.

    This is the one place that runs the program with `mocked=True`, which is what lets a
    simulated stack through (the offline preview and the simulator come here).
    `target_batch` overrides `gpufleet:rollout.targetBatch`. What the stack last deployed is
    what the mocked StackReference answers: `recorded_outputs`, e.g. a previous capture's
    `outputs` (its `deployedSlots`); or, for a stack deployed before `deployedSlots` existed,
    `recorded_batches` and `recorded_images` (its `deployedBatches` and `batchImages`); none of
    them: a fresh stack. `overrides` replaces whole `gpufleet:` keys of the raw config (e.g. a
    different `image`). Re-entrant: each call gets a fresh event loop, config, root stack and monitor.
    """
    if isinstance(spec_or_stack, str):
        stack_name = stack or spec_or_stack
        spec = load_stack(spec_or_stack)
    else:
        stack_name = stack or spec_or_stack.cluster.name
        spec = spec_or_stack
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw.update(overrides or {})
    if target_batch is not None:
        raw["rollout"] = {**raw.get("rollout", {}), "targetBatch": target_batch}
    spec = ClusterSpec.from_raw(raw, source=f"stack {stack_name}")
    if recorded_outputs is None and recorded_batches is not None:
        recorded_outputs = {DEPLOYED_OUTPUT: recorded_batches, LEGACY_IMAGES_OUTPUT: recorded_images or {}}
    mocks = GpufleetMocks(build_plan(spec), stack_name, recorded_outputs)
    monitor = RecordingMonitor(mocks)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    ran: list[Cluster] = []
    try:
        settings.ROOT.set(None)
        pulumi.runtime.set_all_config(pulumi_config_from_raw(raw))
        pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack_name, preview=False, monitor=monitor)
        settings.ROOT.set(None)  # set_mocks made (and finished) a root stack; run_in_stack makes the one exports go to
        loop.run_until_complete(pulumi.runtime.stack.run_in_stack(lambda: ran.append(run_program(mocked=True))))
    finally:
        settings.SETTINGS.rpc_manager.clear()
        settings.SETTINGS.outputs.clear()
        loop.close()
        asyncio.set_event_loop(None)
    return Capture(stack=stack_name, spec=spec, plan=ran[0].plan, registrations=monitor.registrations,
                   outputs=monitor.stack_outputs)
