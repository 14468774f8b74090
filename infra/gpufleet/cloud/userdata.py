"""Per-node user data: MIME multipart, pure functions (no Pulumi), parsed back by tests.

EKS pools (AL2023) get a nodeadm `NodeConfig` part: the node registers itself tainted
`gpufleet.io/gate=pending:NoSchedule` with its slot, batch, block and stack as labels, so
nothing schedules on it before the gates admit it. Slurm and sim pools get a shell part
that records the same identity for the configure step. No secrets ever go in here: nodes
fetch those with their instance role.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from email.mime.text import MIMEText

import yaml

from gpufleet.tagging import SlotIdentity as NodeSlot  # a plan slot or a staged one: name, batch, block

GATE_TAINT = "gpufleet.io/gate=pending:NoSchedule"
NODEADM_CONTENT_TYPE = "application/node.eks.aws"  # what nodeadm looks for in MIME user data
BOUNDARY = "//gpufleet-boundary//"  # fixed so the same inputs give byte-identical user data


@dataclass(frozen=True)
class EksCoordinates:
    name: str
    api_server_endpoint: str
    certificate_authority: str
    cidr: str


def node_labels(slot: NodeSlot, stack: str) -> dict[str, str]:
    return {"gpufleet.io/batch": str(slot.batch), "gpufleet.io/block": str(slot.block),
            "gpufleet.io/stack": stack, "gpufleet.io/slot": slot.name}


def node_config(slot: NodeSlot, stack: str, eks: EksCoordinates, max_pods: int | None = None) -> dict:
    """`max_pods`: kubelet's --max-pods instead of nodeadm's per-type default (which counts the card-0
    ENI the efa-only interface takes). A flag, not `kubelet.config`: kubelet's flags override its
    config file, and nodeadm's CRD types config values as objects."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(node_labels(slot, stack).items()))
    flags = [f"--register-with-taints={GATE_TAINT}", f"--node-labels={labels}"]
    if max_pods is not None:
        flags.append(f"--max-pods={max_pods}")
    kubelet: dict = {"flags": flags}
    return {
        "apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig",
        "spec": {
            "cluster": {"name": eks.name, "apiServerEndpoint": eks.api_server_endpoint,
                        "certificateAuthority": eks.certificate_authority, "cidr": eks.cidr},
            "kubelet": kubelet,
        },
    }


def identity_script(slot: NodeSlot, stack: str) -> str:
    ident = json.dumps({"slot": slot.name, "batch": slot.batch, "block": slot.block, "stack": stack},
                       sort_keys=True)
    return "\n".join([
        "#!/bin/bash", "set -euo pipefail",
        f"hostnamectl set-hostname {shlex.quote(slot.name)}",
        "install -d -m 0755 /etc/gpufleet",
        f"printf '%s\\n' {shlex.quote(ident)} > /etc/gpufleet/node.json", ""])


def _mime(parts: list[tuple[str, str]]) -> str:
    doc = MIMEMultipart(boundary=BOUNDARY)
    for content_type, body in parts:
        main, sub = content_type.split("/")
        if main == "text":
            doc.attach(MIMEText(body, sub))
        else:
            part = MIMENonMultipart(main, sub)
            part.set_payload(body)
            doc.attach(part)
    return doc.as_string()


def eks_user_data(slot: NodeSlot, stack: str, eks: EksCoordinates, max_pods: int | None = None) -> str:
    return _mime([("text/x-shellscript", identity_script(slot, stack)),
                  (NODEADM_CONTENT_TYPE, yaml.safe_dump(node_config(slot, stack, eks, max_pods), sort_keys=True))])


def shell_user_data(slot: NodeSlot, stack: str) -> str:
    return _mime([("text/x-shellscript", identity_script(slot, stack))])
