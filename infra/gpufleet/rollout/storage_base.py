"""The storage base check's clients, made ready before batch 1: the stack's base provisioned, the
clients configured, their names handed to the storage stage.

Why: the storage base check must halt a shortfall before any GPU node is bought (DESIGN.md
section 6). On a Pulumi stack the program creates small non-GPU clients with the file system
(`gpufleet.cloud.storage_clients`); `prepare` brings the stack to its base (`BaseProvisioner`,
batch target 0 when none is set), then runs `playbooks/storage_clients.yml` over them through the
stack's executor (the Lustre client mounts the file system at `storage.mountPath`, fio is
installed), and the storage stage (`acceptance.yml`) then runs on them. Both steps converge, so a
resumed rollout that prepares again changes nothing that is already right.

A client that is not configured stops the rollout with a `ProvisioningError` (nothing is judged on
fewer clients than the check's floor assumes, and nothing is bought): a rerun prepares again.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from gpufleet.errors import ProvisioningError
from gpufleet.rollout.acceptance_collect import PlaybookRunner
from gpufleet.ports import BaseProvisioner, Instance

PLAYBOOK = "storage_clients.yml"
STAGE = "storage-clients"


def storage_client_extravars(site_vars: Mapping[str, Any]) -> dict[str, Any]:
    """What storage_clients.yml needs of site.yml's extravars (`configure_extravars`): the Lustre
    client's pin and mount (role-prefixed `lustre_client_*`) and whether the system is live."""
    out = {k: v for k, v in site_vars.items() if k.startswith("lustre_client_")}
    if not out.get("lustre_client_fs_dns"):
        raise ProvisioningError("the storage clients have no file system to mount: the stack exports no "
                                "fsxDnsName/fsxMountName yet")
    if "gpufleet_live_system" in site_vars:
        out["gpufleet_live_system"] = site_vars["gpufleet_live_system"]
    return out


class StorageClientsBase:
    """Provisions the stack's base and configures its storage clients (see the module docstring)."""

    def __init__(self, provisioner: BaseProvisioner, runner: PlaybookRunner,
                 extravars: Callable[[], Mapping[str, Any]]) -> None:
        self.provisioner, self.runner, self.extravars = provisioner, runner, extravars
        self._clients: dict[str, Instance] = {}

    def prepare(self) -> list[str]:
        """The configured clients' names, the base up first."""
        clients = dict(self.provisioner.provision_base())
        result = self.runner.run_playbook(STAGE, list(clients.values()), PLAYBOOK, dict(self.extravars()))
        why = {h.slot: h.status.value + (f" at {h.task!r}" if h.task else "") + (f" ({h.message})" if h.message else "")
               for h in result.not_ok()}
        why |= {name: "no result" for name in clients if name not in result.hosts}
        if why:
            raise ProvisioningError(f"{len(why)} of {len(clients)} storage client(s) not configured by {PLAYBOOK}: "
                                    + "; ".join(f"{name}: {w}" for name, w in sorted(why.items())[:5]),
                                    retryable=True, slots=tuple(sorted(why)))
        self._clients = clients
        return sorted(clients)

    def inventory(self) -> Mapping[str, Instance]:
        """The clients the last `prepare` configured (the storage stage's hosts)."""
        return dict(self._clients)
