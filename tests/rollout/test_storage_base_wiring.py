"""A real stack's wiring of the storage clients (the fakes of test_wiring_real: a provisioner serving
outputs, a recording ansible-runner): `Wiring.storage_clients` provisions the base, runs
storage_clients.yml over the clients through the stack's own executor with the FSx mount and the
BOM's Lustre pin, and the storage stage's collector then finds the clients among the hosts."""

from __future__ import annotations

import functools
from types import SimpleNamespace

from gpufleet.bom import load_bom
from gpufleet.configure import executor as executor_module
from gpufleet.configure.runner import AnsibleConfigurator
from gpufleet.plan import plan_stack
from gpufleet.rollout import pulumi_provisioner, wiring
from gpufleet.ports import BaseProvisioner, Instance
from gpufleet.rollout.storage_base import PLAYBOOK, StorageClientsBase
from gpufleet.spec import load_stack
from tests.rollout.test_wiring_real import SLURM_OUTPUTS, FakeProvisioner, RecordingBackend, project  # noqa: F401

CLIENTS = {f"dev-storage-client-{i}": Instance(f"dev-storage-client-{i}", f"i-0c1e47000000000{i}", 0, 0, f"10.0.0.25{i}")
           for i in range(2)}


class BaseStack(FakeProvisioner):
    """The fake provisioner with the base step: its update brings up the clients and no GPU node."""

    def __init__(self, outputs):
        super().__init__(outputs)
        self.base_ups = 0

    def provision_base(self):
        self.base_ups += 1
        return CLIENTS

    def inventory(self):
        return {}


def test_the_wired_clients_are_configured_by_the_stacks_executor_and_found_by_the_storage_stage(monkeypatch, project):
    spec = load_stack("dev", project.stacks_dir)
    provisioner, backend = BaseStack(SLURM_OUTPUTS), RecordingBackend()
    monkeypatch.setattr(pulumi_provisioner.PulumiProvisioner, "for_stack",
                        classmethod(lambda cls, *a, **kw: provisioner))
    monkeypatch.setattr(wiring, "_pool", lambda *a, **kw: SimpleNamespace())  # the pool is not under test
    monkeypatch.setattr(executor_module, "AnsibleConfigurator",
                        functools.partial(AnsibleConfigurator, backend=backend, collections=project.root))
    w = wiring.wire(spec, plan_stack(spec, project), project, "dev")
    assert isinstance(provisioner, BaseProvisioner) and isinstance(w.storage_clients, StorageClientsBase)

    assert w.storage_clients.prepare() == sorted(CLIENTS) and provisioner.base_ups == 1
    (call,) = backend.calls
    assert call["playbook"].endswith(PLAYBOOK)
    hosts = call["inventory"]["all"]["hosts"]
    assert set(hosts) == set(CLIENTS)  # no controller, no GPU node
    assert hosts["dev-storage-client-0"]["ansible_host"] == "i-0c1e470000000000"  # over SSM, like the nodes
    extravars = call["extravars"]
    assert (extravars["lustre_client_fs_dns"], extravars["lustre_client_mount_name"],
            extravars["lustre_client_mount_path"]) == (SLURM_OUTPUTS["fsxDnsName"], "abcdefgh", spec.storage.mount_path)
    assert extravars["lustre_client_version"] == load_bom(project.path(spec.image.bom)).for_os(spec.image.os).lustre_client
    assert "nvidia_driver_version" not in extravars and "munge_key_secret_id" not in extravars
    assert w.acceptance._instances(sorted(CLIENTS)) == CLIENTS  # the storage stage's hosts
