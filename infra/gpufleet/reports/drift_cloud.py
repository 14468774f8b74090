"""The cloud layer's decisions: Pulumi engine steps -> changed resources and fields, and a boto3
scan compared with the stack's state -> what Pulumi does not know. Pure: no I/O, no clock.

Code vs state is a preview that expects no changes; cloud vs state is a refresh preview. Both come
as engine step events (`StepView`, built by the adapter from the Automation API's events): a
resource whose step changes something is drift, and its `detailedDiff` paths say which fields.
Values are shown for context, with everything Pulumi marks secret as `[secret]` (the engine
prints a secret as that string when secrets are not shown; a state document marks it with the
secret signature key): a report never carries a secret's plaintext.

What Pulumi cannot see needs the cloud's own view (`CloudScan`): instances in the stack's subnets
or placement groups or tagged for the stack that the state does not hold (orphans, hand-made
nodes), security-group rules on the stack's groups that the state does not declare (added by
hand) or that it declares and the group lacks, instances whose instance type or AMI differs from
the launch-template version they were launched from, and capacity reservations or blocks that
end within the warning window or are no longer active.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

from gpufleet import tagging as t
from gpufleet.reports.drift import Finding, Layer, Severity

SECRET = "[secret]"
SECRET_SIG_KEY = "4dabf18193072939515e22adb298388d"  # resource.SigKey: marks a secret in state documents
MAX_VALUE_CHARS = 160

CODE_VS_STATE = "code-vs-state"
CLOUD_VS_STATE = "cloud-vs-state"
ORPHAN = "orphan-instance"
SG_ADDED = "sg-rule-added"
SG_MISSING = "sg-rule-missing"
LT_MISMATCH = "launch-template-mismatch"
CAPACITY = "capacity-expiring"

INSTANCE_TYPE = "aws:ec2/instance:Instance"
SG_TYPE = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE_TYPE = "aws:ec2/securityGroupRule:SecurityGroupRule"
VPC_INGRESS_TYPE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
VPC_EGRESS_TYPE = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SUBNET_TYPE = "aws:ec2/subnet:Subnet"
PLACEMENT_GROUP_TYPE = "aws:ec2/placementGroup:PlacementGroup"
STACK_TYPE = "pulumi:pulumi:Stack"

# Step ops that change something. `refresh` is a change only when it carries diffs.
PREVIEW_CHANGE_OPS = {"create", "update", "replace", "create-replacement", "delete", "delete-replaced", "import",
                      "import-replacement", "read-replacement"}
REFRESH_CHANGE_OPS = {"update", "delete", "replace"}
_OP_RANK = {"replace": 0, "delete": 1, "create": 1, "import": 2, "update": 3}  # the strongest step names the change


# ------------------------------------------------------------------ engine steps

@dataclass(frozen=True)
class StepView:
    """One engine step as the adapter read it (resourcePreEvent or resOutputsEvent metadata)."""

    op: str
    urn: str
    type: str
    diffs: tuple[str, ...] = ()
    detailed: Mapping[str, tuple[str, bool]] = field(default_factory=dict)  # path -> (kind, input_diff)
    old_inputs: Mapping[str, Any] = field(default_factory=dict)
    old_outputs: Mapping[str, Any] = field(default_factory=dict)
    new_inputs: Mapping[str, Any] = field(default_factory=dict)
    new_outputs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FieldChange:
    path: str
    kind: str  # add | delete | update (and their -replace forms)
    old: str | None
    new: str | None


@dataclass(frozen=True)
class ResourceChange:
    urn: str
    type: str
    op: str
    fields: tuple[FieldChange, ...]

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


def mask(value: Any) -> Any:
    """The value with every secret replaced by `[secret]` (recursively)."""
    if isinstance(value, Mapping):
        if SECRET_SIG_KEY in value:
            return SECRET
        return {k: mask(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask(v) for v in value]
    return value


def _secret_anywhere(value: Any) -> bool:
    if isinstance(value, Mapping):
        return SECRET_SIG_KEY in value or any(_secret_anywhere(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_secret_anywhere(v) for v in value)
    return value == SECRET


def show(value: Any) -> str | None:
    """A short display form of a (masked) value; None when absent."""
    if value is _ABSENT or value is None:
        return None
    value = mask(value)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."


_ABSENT = object()
_TOKEN = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|\.?([^.\[\]]+)')


def path_tokens(path: str) -> list[str | int]:
    """`tags["gpufleet.io/slot"]`, `ingress[0].cidrBlocks` -> ['tags', 'gpufleet.io/slot'], ['ingress', 0, 'cidrBlocks']."""
    out: list[str | int] = []
    for quoted, index, name in _TOKEN.findall(path):
        out.append(int(index) if index else (quoted.replace('\\"', '"') if quoted else name))
    return out


def value_at(doc: Mapping[str, Any], path: str) -> Any:
    cur: Any = doc
    for tok in path_tokens(path):
        if isinstance(tok, int) and isinstance(cur, list) and tok < len(cur):
            cur = cur[tok]
        elif isinstance(tok, str) and isinstance(cur, Mapping) and tok in cur:
            cur = cur[tok]
        else:
            return _ABSENT
        if isinstance(cur, Mapping) and SECRET_SIG_KEY in cur:
            return SECRET  # a secret container: nothing below it is shown
    return cur


def _field_changes(step: StepView) -> list[FieldChange]:
    detailed = dict(step.detailed) or {d: ("update", True) for d in step.diffs}
    out = []
    for path, (kind, input_diff) in sorted(detailed.items()):
        old_doc, new_doc = ((step.old_inputs, step.new_inputs) if input_diff else (step.old_outputs, step.new_outputs))
        old, new = value_at(old_doc, path), value_at(new_doc, path)
        if _secret_anywhere(old) or _secret_anywhere(new):
            old, new = (SECRET if old is not _ABSENT else _ABSENT), (SECRET if new is not _ABSENT else _ABSENT)
        out.append(FieldChange(path=path, kind=kind, old=show(old), new=show(new)))
    return out


def resource_changes(steps: Iterable[StepView], *, refresh: bool) -> list[ResourceChange]:
    """The resources a preview (refresh=False) or a refresh preview (refresh=True) would change,
    one per URN (a replacement's several steps fold into one), in URN order. The stack resource
    itself (outputs only) is left out."""
    ops = REFRESH_CHANGE_OPS if refresh else PREVIEW_CHANGE_OPS
    best: dict[str, tuple[str, str, dict[str, FieldChange]]] = {}
    for s in steps:
        if s.type == STACK_TYPE:
            continue
        changed = s.op in ops or (s.op == "refresh" and bool(s.diffs or s.detailed))
        if not changed:
            continue
        op = _SAME_AS.get(s.op, s.op)
        prev = best.get(s.urn)
        fields = dict(prev[2]) if prev else {}
        for fc in _field_changes(s):
            fields[fc.path] = fc
        keep_op = op if prev is None or _OP_RANK.get(op, 9) < _OP_RANK.get(prev[1], 9) else prev[1]
        best[s.urn] = (s.type, keep_op, fields)
    return [ResourceChange(urn=urn, type=typ, op=op, fields=tuple(fields[p] for p in sorted(fields)))
            for urn, (typ, op, fields) in sorted(best.items())]


_OP_TEXT = {
    False: {"create": "in code, not in the state (an update would create it)",
            "delete": "in the state, not in code (an update would delete it)",
            "replace": "code differs from the state; an update would replace it",
            "update": "code differs from the state",
            "import": "in code as an import, not in the state (an update would import it)"},
    True: {"delete": "in the state, gone from the cloud",
           "update": "the cloud differs from the state",
           "replace": "the cloud differs from the state"},
}
_SAME_AS = {"create-replacement": "replace", "delete-replaced": "replace", "read-replacement": "replace",
            "import-replacement": "replace", "refresh": "update"}  # the op a person reads for each engine step


def change_findings(changes: Sequence[ResourceChange], *, refresh: bool) -> list[Finding]:
    """One finding per changed field (or per resource when the engine named no field)."""
    check = CLOUD_VS_STATE if refresh else CODE_VS_STATE
    texts = _OP_TEXT[refresh]
    out = []
    for c in changes:
        base = texts.get(c.op, f"{c.op} pending")
        severity = Severity.CRITICAL if c.op in ("delete", "replace") and c.type == INSTANCE_TYPE else Severity.HIGH
        subject = f"{c.type}::{c.name}"
        if not c.fields:
            out.append(Finding(layer=Layer.CLOUD, check=check, subject=subject, severity=severity,
                               message=f"{base} ({c.urn})"))
        for f in c.fields:
            expected, found = (f.new, f.old) if not refresh else (f.old, f.new)  # code/state is the expectation
            out.append(Finding(layer=Layer.CLOUD, check=check, subject=subject, field=f.path, expected=expected,
                               found=found, severity=severity, message=f"{base}: {f.path} ({f.kind})"))
    return out


# ------------------------------------------------------------------ the state, as the scan needs it

@dataclass(frozen=True, order=True)
class Rule:
    """One security-group permission for one source, normalized across the state's and EC2's shapes."""

    direction: str  # ingress | egress
    protocol: str  # -1, tcp, udp, icmp, icmpv6 or a protocol number
    from_port: int | None
    to_port: int | None
    source: str  # a CIDR, an IPv6 CIDR, a prefix list id or a security group id

    def text(self) -> str:
        ports = "all ports" if self.from_port is None else (
            f"port {self.from_port}" if self.from_port == self.to_port else f"ports {self.from_port}-{self.to_port}")
        proto = "all traffic" if self.protocol == "-1" else self.protocol
        peer = "from" if self.direction == "ingress" else "to"
        return f"{self.direction} {proto} {ports} {peer} {self.source}"


_PROTOCOLS = {"-1": "-1", "all": "-1", "6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6"}


def rule(direction: str, protocol: Any, from_port: Any, to_port: Any, source: str) -> Rule:
    proto = _PROTOCOLS.get(str(protocol).lower(), str(protocol).lower())
    if proto == "-1":
        return Rule(direction, proto, None, None, source)
    lo = int(from_port) if from_port is not None else -1
    hi = int(to_port) if to_port is not None else lo
    return Rule(direction, proto, lo, hi, source)


def _inline_rules(direction: str, r: Mapping[str, Any], own_id: str) -> list[Rule]:
    sources = [*(r.get("cidrBlocks") or []), *(r.get("ipv6CidrBlocks") or []), *(r.get("prefixListIds") or []),
               *(r.get("securityGroups") or [])]
    if r.get("self"):
        sources.append(own_id)
    return [rule(direction, r.get("protocol"), r.get("fromPort"), r.get("toPort"), s) for s in sources]


@dataclass(frozen=True)
class ManagedInstance:
    urn: str
    id: str
    slot: str | None
    launch_template_id: str | None
    launch_template_version: str | None


@dataclass(frozen=True)
class StateView:
    """What the stack's state holds that the scan compares with."""

    instances: Mapping[str, ManagedInstance]  # by instance id
    security_groups: Mapping[str, tuple[Rule, ...]]  # group id -> the rules the state declares
    security_group_names: Mapping[str, str]  # group id -> logical name
    subnets: frozenset[str]
    placement_groups: frozenset[str]


def state_view(deployment: Mapping[str, Any]) -> StateView:
    """From a `pulumi stack export` document (resources pending deletion left out)."""
    resources = [r for r in (deployment.get("deployment") or {}).get("resources") or [] if not r.get("delete")]
    instances: dict[str, ManagedInstance] = {}
    groups: dict[str, list[Rule]] = {}
    names: dict[str, str] = {}
    subnets: set[str] = set()
    pgs: set[str] = set()
    extra: list[tuple[str, Rule]] = []
    for r in resources:
        typ, rid, out = r.get("type"), r.get("id"), r.get("outputs") or {}
        if not rid:
            continue
        if typ == INSTANCE_TYPE:
            lt = out.get("launchTemplate") or {}
            instances[rid] = ManagedInstance(urn=r.get("urn", ""), id=rid, slot=(out.get("tags") or {}).get(t.SLOT),
                                             launch_template_id=lt.get("id") or None,
                                             launch_template_version=str(lt["version"]) if lt.get("version") else None)
        elif typ == SG_TYPE:
            names[rid] = r.get("urn", "").rsplit("::", 1)[-1]
            groups[rid] = [x for d in ("ingress", "egress") for item in out.get(d) or []
                           for x in _inline_rules(d, item, rid)]
        elif typ == SG_RULE_TYPE:
            gid = str(out.get("securityGroupId") or "")
            src = out.get("sourceSecurityGroupId")
            item = {**out, "securityGroups": [src] if src else []}
            extra += [(gid, x) for x in _inline_rules(out.get("type", "ingress"), item, gid)]
        elif typ in (VPC_INGRESS_TYPE, VPC_EGRESS_TYPE):
            gid = str(out.get("securityGroupId") or "")
            src = (out.get("cidrIpv4") or out.get("cidrIpv6") or out.get("prefixListId")
                   or out.get("referencedSecurityGroupId"))
            if src:
                extra.append((gid, rule("ingress" if typ == VPC_INGRESS_TYPE else "egress", out.get("ipProtocol"),
                                        out.get("fromPort"), out.get("toPort"), src)))
        elif typ == SUBNET_TYPE:
            subnets.add(rid)
        elif typ == PLACEMENT_GROUP_TYPE:
            pgs.add(out.get("name") or rid)
    for gid, x in extra:
        groups.setdefault(gid, []).append(x)
    return StateView(instances=instances, security_groups={g: tuple(sorted(set(rs))) for g, rs in groups.items()},
                     security_group_names=names, subnets=frozenset(subnets), placement_groups=frozenset(pgs))


# ------------------------------------------------------------------ the cloud's view

@dataclass(frozen=True)
class CloudInstance:
    id: str
    state: str
    instance_type: str
    image_id: str
    subnet_id: str | None
    placement_group: str | None
    tags: Mapping[str, str]
    matched_by: tuple[str, ...]  # why the scan found it: tag, subnet, placement group


@dataclass(frozen=True)
class TemplateVersion:
    id: str
    version: str
    instance_type: str | None
    image_id: str | None


@dataclass(frozen=True)
class Reservation:
    id: str
    state: str
    reservation_type: str  # default | capacity-block
    instance_type: str
    total: int
    end_date: datetime | None


@dataclass(frozen=True)
class CloudScan:
    instances: Mapping[str, CloudInstance]
    rules: Mapping[str, tuple[Rule, ...]]  # group id -> its rules as EC2 has them
    templates: Mapping[tuple[str, str], TemplateVersion | None]  # (template id, version) -> data; None: gone
    reservations: tuple[Reservation, ...]


def ec2_rules(group: Mapping[str, Any]) -> tuple[Rule, ...]:
    """DescribeSecurityGroups' IpPermissions / IpPermissionsEgress as normalized rules."""
    out: list[Rule] = []
    for key, direction in (("IpPermissions", "ingress"), ("IpPermissionsEgress", "egress")):
        for p in group.get(key) or []:
            sources = [*(x["CidrIp"] for x in p.get("IpRanges") or []),
                       *(x["CidrIpv6"] for x in p.get("Ipv6Ranges") or []),
                       *(x["PrefixListId"] for x in p.get("PrefixListIds") or []),
                       *(x["GroupId"] for x in p.get("UserIdGroupPairs") or [])]
            out += [rule(direction, p.get("IpProtocol"), p.get("FromPort"), p.get("ToPort"), s) for s in sources]
    return tuple(sorted(set(out)))


def orphan_findings(state: StateView, scan: CloudScan) -> list[Finding]:
    out = []
    for iid, inst in sorted(scan.instances.items()):
        if iid in state.instances or inst.state in ("terminated", "shutting-down"):
            continue
        slot = inst.tags.get(t.SLOT)
        out.append(Finding(
            layer=Layer.CLOUD, check=ORPHAN, subject=iid, field="instance", expected="not in the cloud",
            found=f"{inst.instance_type} {inst.state}" + (f", tagged slot {slot}" if slot else ""),
            severity=Severity.HIGH,
            message=f"{inst.instance_type} instance {iid} ({inst.state}) found by {', '.join(inst.matched_by)} is not in "
                    "the Pulumi state: a hand-made node, or an orphan that keeps billing"))
    return out


def rule_findings(state: StateView, scan: CloudScan) -> list[Finding]:
    out = []
    for gid, declared in sorted(state.security_groups.items()):
        have = scan.rules.get(gid)
        if have is None:
            continue  # the group itself is gone: the refresh preview says so
        name = state.security_group_names.get(gid, gid)
        for r in sorted(set(have) - set(declared)):
            out.append(Finding(layer=Layer.CLOUD, check=SG_ADDED, subject=f"{gid} ({name})", field=r.direction,
                               expected=None, found=r.text(), severity=Severity.HIGH,
                               message=f"security group {name} has a rule the state does not declare "
                                       f"(added by hand): {r.text()}"))
        for r in sorted(set(declared) - set(have)):
            out.append(Finding(layer=Layer.CLOUD, check=SG_MISSING, subject=f"{gid} ({name})", field=r.direction,
                               expected=r.text(), found=None, severity=Severity.HIGH,
                               message=f"security group {name} lacks a rule the state declares "
                                       f"(removed by hand): {r.text()}"))
    return out


def template_findings(state: StateView, scan: CloudScan) -> list[Finding]:
    out = []
    for iid, m in sorted(state.instances.items()):
        inst = scan.instances.get(iid)
        if inst is None or not m.launch_template_id or not m.launch_template_version:
            continue
        key = (m.launch_template_id, m.launch_template_version)
        if key not in scan.templates:
            continue
        lt = scan.templates[key]
        who = f"{iid} ({m.slot})" if m.slot else iid
        if lt is None:
            out.append(Finding(
                layer=Layer.CLOUD, check=LT_MISMATCH, subject=who, field="launchTemplate",
                expected=f"{m.launch_template_id} version {m.launch_template_version}", found=None,
                severity=Severity.HIGH,
                message=f"instance {who} was launched from launch template {m.launch_template_id} version "
                        f"{m.launch_template_version}, which EC2 no longer has (deleted by hand?): a replacement "
                        "into this slot cannot be launched the same way"))
            continue
        for what, want, have in (("instanceType", lt.instance_type, inst.instance_type),
                                 ("imageId", lt.image_id, inst.image_id)):
            if want and have and want != have:
                out.append(Finding(
                    layer=Layer.CLOUD, check=LT_MISMATCH, subject=who, field=what, expected=want, found=have,
                    severity=Severity.HIGH,
                    message=f"instance {who} runs {what} {have}, its launch template {m.launch_template_id} "
                            f"version {m.launch_template_version} says {want}"))
    return out


def capacity_findings(scan: CloudScan, now: datetime, warn_within: timedelta) -> list[Finding]:
    out = []
    for r in scan.reservations:
        kind = "capacity block" if r.reservation_type == "capacity-block" else "capacity reservation"
        ends = r.end_date.isoformat() if r.end_date else "no end date"
        if r.state == "not-found":
            out.append(Finding(layer=Layer.CLOUD, check=CAPACITY, subject=r.id, field="state", expected="active",
                               found=r.state, severity=Severity.CRITICAL,
                               message=f"the stack targets capacity {r.id}, which EC2 does not know in this region: "
                                       "its nodes cannot be replaced on reserved capacity"))
        elif r.state not in ("active", "scheduled", "payment-pending"):
            out.append(Finding(layer=Layer.CLOUD, check=CAPACITY, subject=r.id, field="state", expected="active",
                               found=r.state, severity=Severity.CRITICAL,
                               message=f"{kind} {r.id} ({r.total} x {r.instance_type}) is {r.state}: its nodes "
                                       "no longer run on reserved capacity"))
        elif r.end_date is not None and r.end_date - now <= warn_within:
            left = max(r.end_date - now, timedelta(0))
            out.append(Finding(layer=Layer.CLOUD, check=CAPACITY, subject=r.id, field="endDate",
                               expected=f"later than {(now + warn_within).isoformat()}", found=ends,
                               severity=Severity.CRITICAL,
                               message=f"{kind} {r.id} ({r.total} x {r.instance_type}) ends in "
                                       f"{left.total_seconds() / 3600:.1f} h ({ends})"
                                       + ("; AWS starts terminating its instances 30 minutes before"
                                          if r.reservation_type == "capacity-block" else "")))
    return out


def unmanaged_findings(state: StateView, scan: CloudScan, now: datetime, warn_within: timedelta) -> list[Finding]:
    """Everything the boto3 scan finds that the state does not explain."""
    return [*orphan_findings(state, scan), *rule_findings(state, scan), *template_findings(state, scan),
            *capacity_findings(scan, now, warn_within)]
