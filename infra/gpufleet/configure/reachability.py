"""Security-group reachability from a node: which TCP services it must reach before a rollout, and
what bash's `/dev/tcp` said when the node tried each one.

Why from the node: the security groups and NACLs are checked offline by policies on the captured
registration (aws-program-review A1, B5), but only a connect from the node itself proves the path
a real VPC gives it (routes, endpoint DNS, the file system's own security group). Pure: the
targets come from the stack's Pulumi outputs, the verdicts from each probe's output and exit code
as `playbooks/doctor.yml` records them; nothing here does I/O.

A path a node cannot test is a `Note`, never a pass: the Kueue webhook (9443) is opened by the
EKS control plane towards the pods, and slurmdbd is reached by slurmctld on the head node itself.
A target whose address the outputs do not name is a `Note` too.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gpufleet.plan.network import SLURMCTLD_PORT

PROBE_TIMEOUT_S = 5
LUSTRE_PORT = 988  # FSx for Lustre: the client connects to the servers' TCP 988
KUEUE_WEBHOOK_PORT = 9443
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.?$")

SOURCE_EKS = ("aws-program-review A1; EKS security group requirements "
              "(docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html)")
SOURCE_SLURMCTLD = "slurm.conf(5) SlurmctldPort; gpufleet.plan.network SLURMCTLD_PORT (node security group egress)"
SOURCE_LUSTRE = ("FSx for Lustre file system access control with Amazon VPC, TCP 988 "
                 "(docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html)")

# what bash prints on stderr for a failed connect (captured: bash 5.1, `bash -c '</dev/tcp/H/P'`)
_REASONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("reach-refused", ("Connection refused",),
     "the host answered but nothing listens there (the path is open; the service is down or elsewhere)"),
    ("reach-dns", ("Name or service not known", "Temporary failure in name resolution",
                   "No address associated with hostname"),
     "the name does not resolve on the node (VPC DNS, or the output names another VPC's resource)"),
    ("reach-no-route", ("No route to host", "Network is unreachable"),
     "no route from the node (route table, or a rejecting NACL)"),
)


@dataclass(frozen=True)
class Target:
    """One TCP service the node must reach; `key` is its doctor.json entry."""

    name: str  # reach.<name> in the differences
    what: str
    host: str
    port: int
    source: str

    @property
    def key(self) -> str:
        return f"reach_{self.name}"


@dataclass(frozen=True)
class Note:
    """A path doctor did not test, and why (printed, never counted as reachable)."""

    check: str
    detail: str
    source: str


@dataclass(frozen=True)
class Unreachable:
    target: Target
    code: str  # reach-timeout, reach-refused, reach-dns, reach-no-route, reach-error, reach-not-read
    detail: str


def eks_endpoint(kubeconfig: Any) -> tuple[str, int] | None:
    """(host, port) of the API server in the stack's `kubeconfig` output (gpufleet.cloud.eks.kubeconfig:
    JSON), or None when it names none."""
    try:
        config = json.loads(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
        server = config["clusters"][0]["cluster"]["server"]
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    parts = urlsplit(str(server))
    if parts.scheme != "https" or not parts.hostname:
        return None
    try:
        return parts.hostname, parts.port or 443
    except ValueError:  # a port that is no number
        return None


def safe_address(host: str) -> bool:
    """An IP or a DNS name: the only addresses put into a probe's shell command."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(host))


def targets(pool: str | None, outputs: Mapping[str, Any] | None, *, outputs_error: str | None = None,
            slurmdbd_port: int | None = None) -> tuple[list[Target], list[Note]]:
    """What a node of this pool must reach, from the stack's outputs (None: unread, `outputs_error` says
    why); each target the outputs cannot address, and each path a node cannot test, is a Note."""
    wanted: list[tuple[str, str, str, int, str, Any]] = []  # name, what, output, port, source, address
    notes: list[Note] = []
    out = outputs or {}
    if pool == "kubernetes":
        endpoint = eks_endpoint(out.get("kubeconfig")) if out.get("kubeconfig") else None
        if out.get("kubeconfig") and endpoint is None:
            notes.append(Note("reach.eks_api", "not tested: the `kubeconfig` output names no https server (a secret "
                              "output printed without --show-secrets reads '[secret]')", SOURCE_EKS))
        else:
            wanted.append(("eks_api", "the EKS API endpoint (kubelet, the VPC CNI)", "kubeconfig",
                           endpoint[1] if endpoint else 443, SOURCE_EKS, endpoint[0] if endpoint else None))
        notes.append(Note("reach.kueue_webhook",
                          f"not testable from a node: the EKS control plane connects to the Kueue webhook's pods "
                          f"on {KUEUE_WEBHOOK_PORT} (control plane -> node), not the node to anything; the "
                          "eks_security_group_paths policy checks that rule on the registration",
                          "aws-program-review A3"))
    if pool == "slurm":
        wanted.append(("slurmctld", "slurmctld on the Slurm controller", "slurmControllerIp", SLURMCTLD_PORT,
                       SOURCE_SLURMCTLD, out.get("slurmControllerIp")))
        if slurmdbd_port is not None:
            notes.append(Note("reach.slurmdbd",
                              f"not tested from a node: slurmdbd ({slurmdbd_port}) runs on the head node and is "
                              "reached by slurmctld there; the controller's security group admits only slurmctld "
                              "and srun's ports from GPU nodes, so a node is not meant to reach it",
                              "gpufleet.cloud.slurm_controller security group"))
    wanted.append(("fsx_lustre", "the FSx for Lustre file system", "fsxDnsName", LUSTRE_PORT, SOURCE_LUSTRE,
                   out.get("fsxDnsName")))
    found: list[Target] = []
    for name, what, output, port, source, address in wanted:
        if outputs is None:
            notes.append(Note(f"reach.{name}", f"not tested: {what}'s address is unknown, the stack's outputs "
                              f"could not be read ({outputs_error or 'no outputs'})", source))
        elif not address:
            notes.append(Note(f"reach.{name}", f"not tested: {what}'s address is unknown, the stack has no "
                              f"`{output}` output (a stack not yet up, or --outputs from another stack)", source))
        elif not safe_address(str(address)):
            notes.append(Note(f"reach.{name}", f"not tested: the `{output}` output {str(address)[:60]!r} is no IP "
                              "or DNS name", source))
        else:
            found.append(Target(name, what, str(address), int(port), source))
    return found, notes


def probe_command(target: Target) -> str:
    """One TCP connect from the node, through bash's /dev/tcp (no nc or curl needed on the AMI)."""
    return f"timeout {PROBE_TIMEOUT_S} bash -c '</dev/tcp/{target.host}/{target.port}'"


def unreachable(found: list[Target], collected: Mapping[str, Any]) -> list[Unreachable]:
    """Each target the node's probe did not connect to, with a reason code from its output and exit code."""
    out: list[Unreachable] = []
    for target in found:
        entry = collected.get(target.key)
        if not entry:
            out.append(Unreachable(target, "reach-not-read", "doctor.json has no result for this probe"))
            continue
        code, output = entry.get("exit_code"), str(entry.get("output") or "")
        if code == 0:
            continue
        if code == 124:
            out.append(Unreachable(target, "reach-timeout", f"no answer in {PROBE_TIMEOUT_S} s (a security group "
                                   "or NACL drops it)"))
            continue
        reason = next(((c, why) for c, needles, why in _REASONS if any(n in output for n in needles)), None)
        if reason is None:
            last = (output.strip().splitlines() or [f"exit code {code}"])[-1]
            out.append(Unreachable(target, "reach-error", last[:160]))
        else:
            out.append(Unreachable(target, *reason))
    return out
