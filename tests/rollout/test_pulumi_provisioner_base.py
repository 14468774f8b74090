"""`PulumiProvisioner.provision_base` against the fake `PulumiCommand` of the provisioner tests: the
base (batch target 0 when none is set, never lowered) in one `up`, the storage clients from the
stack's `storageClients` output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ProvisioningError
from gpufleet.ports import BaseProvisioner, Instance
from tests.rollout.test_pulumi_provisioner import (AFTER_UP, GET_TARGET, SELECT, SET_TARGET, UP, FakePulumi, _argv,
                                                   _provisioner)

CLIENTS = {"dev-storage-client-0": {"instanceId": "i-0c1", "privateIp": "10.20.0.254"},
           "dev-storage-client-1": {"instanceId": "i-0c2", "privateIp": "10.20.0.253"}}


# the engine's log of an update that only creates the base (the shape of fixtures/pulumi_events/: a
# prelude, the summary, then the cancel event the Automation API stops reading at)
BASE_UP = [{"preludeEvent": {"config": {"aws:region": "us-east-1"}}, "sequence": 0, "timestamp": 1764547200},
           {"sequence": 1, "summaryEvent": {"PolicyPacks": {}, "durationSeconds": 410, "maybeCorrupt": False,
                                             "resourceChanges": {"create": 58}}, "timestamp": 1764547610},
           {"cancelEvent": {}, "sequence": 2, "timestamp": 1764547611}]


class BaseStack(FakePulumi):
    """The fake CLI, its stack exporting `storageClients` (None: an older program without them)."""

    def __init__(self, clients: dict | None, stderr: str = "") -> None:
        super().__init__([])
        self.clients, self.stderr = clients, stderr

    def _up(self, a: list[str]) -> tuple[str, str, int]:
        Path(a[a.index("--event-log") + 1]).write_text("".join(json.dumps(e) + "\n" for e in BASE_UP))
        return "", self.stderr, 255 if self.stderr else 0

    def _answer(self, a: list[str]) -> tuple[str, str, int]:
        if a[:2] == ["stack", "output"]:
            outputs = {"nodes": self.nodes(), **({"storageClients": self.clients} if self.clients is not None else {})}
            return json.dumps(outputs), "", 0
        return super()._answer(a)


def test_a_fresh_stack_gets_target_0_one_up_and_its_storage_clients(tmp_path):
    fake = BaseStack(CLIENTS)
    p, _ = _provisioner(fake, tmp_path)
    assert isinstance(p, BaseProvisioner)
    clients = p.provision_base()
    assert _argv(fake.calls) == [SELECT, GET_TARGET, SET_TARGET(0), UP, *AFTER_UP]
    assert clients == {"dev-storage-client-0": Instance("dev-storage-client-0", "i-0c1", 0, 0, "10.20.0.254"),
                       "dev-storage-client-1": Instance("dev-storage-client-1", "i-0c2", 0, 0, "10.20.0.253")}
    assert fake.resources == {}  # no GPU node


def test_a_stack_with_a_target_keeps_it(tmp_path):
    fake = BaseStack(CLIENTS)
    fake.config["gpufleet:rollout.targetBatch"] = "2"
    p, _ = _provisioner(fake, tmp_path)
    assert sorted(p.provision_base()) == sorted(CLIENTS)
    assert _argv(fake.calls) == [SELECT, GET_TARGET, UP, *AFTER_UP]  # never lowered
    assert sorted(p.storage_clients()) == sorted(CLIENTS)


def test_a_stack_without_storage_clients_is_refused(tmp_path):
    p, _ = _provisioner(BaseStack(None), tmp_path)
    with pytest.raises(ProvisioningError, match="exports no `storageClients`"):
        p.provision_base()


def test_no_capacity_for_a_client_is_a_retryable_failure(tmp_path):
    stderr = ("error: creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have sufficient "
              "c6in.8xlarge capacity in the Availability Zone you requested (us-east-1a).\n")
    p, _ = _provisioner(BaseStack(CLIENTS, stderr), tmp_path)
    with pytest.raises(ProvisioningError, match="base of stack gpu is not up.*InsufficientInstanceCapacity") as err:
        p.provision_base()
    assert err.value.retryable
