"""A Pulumi stack's storage base check runs on its own storage clients before any GPU node is bought
(the orchestrator over the rollout tests' fake cloud, the hooks placed as on such a stack): the
clients are prepared and checked first, a shortfall halts with nothing provisioned, a resumed
rollout neither prepares nor collects a journaled verdict again; the network check stays on the
canary's configured hosts. And `StorageClientsBase`: the base, then storage_clients.yml on it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pytest

from gpufleet import catalog
from gpufleet.errors import ProvisioningError
from gpufleet.rollout.acceptance import AcceptanceHooks, AcceptanceRunner
from gpufleet.ports import HostOutcome, HostStatus, Instance, StageResult
from gpufleet.rollout.storage_base import PLAYBOOK, StorageClientsBase, storage_client_extravars
from gpufleet.sim.acceptance import AcceptanceFaults
from tests.acceptance.test_real_stack_hooks import Call, Crash, Recording
from tests.rollout.fakes import FakeCloud
from tests.rollout.helpers import orchestrator, small_spec

SPEC = small_spec()
SKU = catalog.get(SPEC.cluster.instance_type)
CLIENTS = [f"tst-storage-client-{i}" for i in range(SPEC.acceptance.storage_clients)]


def bought(cloud: FakeCloud) -> set[str]:
    return {slot for _op, slot, _id in cloud.ledger}


@dataclass
class Clients:
    """The stack's storage clients: what the GPU cloud had bought at each `prepare`."""

    cloud: FakeCloud
    prepared: list[set[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the display was told, "PREPARED" where prepare ran

    def prepare(self) -> list[str]:
        self.prepared.append(bought(self.cloud))
        self.notes.append("PREPARED")
        return list(CLIENTS)


def rollout(tmp_path: Path, collector: Recording, clients: Clients, spec=SPEC):
    o = orchestrator(tmp_path, collector.cloud, spec)
    collector.plan_storage = o.plan.storage
    runner = AcceptanceRunner(spec, o.plan, tmp_path / "state", collector, SKU, journal=o.journal)
    o.hooks = AcceptanceHooks(runner, on_hosts=True, storage_clients=clients, note=clients.notes.append)
    return o


def events(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "state" / "journal.jsonl").read_text().splitlines()]


def first(evs: list[dict], **match: object) -> int:
    return next(i for i, e in enumerate(evs) if all(e.get(k) == v for k, v in match.items()))


def test_storage_runs_on_the_clients_before_any_gpu_node_and_network_on_the_configured_canary(tmp_path):
    cloud = FakeCloud()
    collector, clients = Recording(cloud), Clients(cloud)
    o = rollout(tmp_path, collector, clients)
    canary = {n.name for n in o.plan.batch_nodes(1)}
    out = o.run()
    assert out.finished and collector.stages == ["storage", "network", "smoke"]
    storage, network, _ = collector.calls
    # the display hears of the base and the clients before and after their minutes of preparation
    assert [n.split(":")[0] for n in clients.notes] == ["acceptance storage", "PREPARED", "acceptance storage"]
    assert "no GPU node" in clients.notes[0] and f"{len(CLIENTS)} storage client(s) ready" in clients.notes[2]
    assert clients.prepared == [set()] and storage.provisioned == set()  # nothing bought before the verdict
    assert storage.nodes == CLIENTS and set(network.nodes) == canary and network.provisioned == canary
    evs = events(tmp_path)
    assert first(evs, type="acceptance", stage="storage", to="passed") < first(evs, type="nodes", batch=1)
    assert first(evs, type="nodes", batch=1, to="configured") < first(evs, type="acceptance", stage="network",
                                                                      to="started")
    assert first(evs, type="acceptance", stage="network", to="passed") < first(evs, type="gated", batch=1)


def test_a_storage_shortfall_halts_with_no_gpu_node_bought_and_stays_halted_on_resume(tmp_path):
    cloud = FakeCloud()
    slow, clients = Recording(cloud, AcceptanceFaults(slow_storage=0.3)), Clients(cloud)
    out = rollout(tmp_path, slow, clients).run()
    assert out.halted and "acceptance storage failed (storage-write-slow" in out.halt_reason
    assert cloud.ledger == [] and slow.stages == ["storage"] and "network" not in out.state.acceptance
    assert not [e for e in events(tmp_path) if e["type"] in ("nodes", "batch", "gated")]

    healthy, again = Recording(cloud), Clients(cloud)
    resumed = rollout(tmp_path, healthy, again).run()  # the journaled verdict halts again
    assert resumed.halted and resumed.halt_reason == out.halt_reason
    assert healthy.stages == [] and again.prepared == [] and again.notes == [] and cloud.ledger == []


def test_a_crash_inside_the_storage_stage_prepares_and_collects_it_again_once(tmp_path):
    cloud = FakeCloud()
    crashing, clients = Recording(cloud, crash_in="storage"), Clients(cloud)
    with pytest.raises(Crash):
        rollout(tmp_path, crashing, clients).run()
    assert cloud.ledger == []
    resumed, clients_again = Recording(cloud), Clients(cloud)
    out = rollout(tmp_path, resumed, clients_again).run()
    assert out.finished and resumed.stages == ["storage", "network", "smoke"] and clients_again.prepared == [set()]
    assert out.state.acceptance["storage"].attempt == 2
    last, last_clients = Recording(cloud), Clients(cloud)
    assert rollout(tmp_path, last, last_clients).run().finished and last.stages == [] and last_clients.prepared == []


# --- StorageClientsBase ------------------------------------------------------------------------------

INSTANCES = {name: Instance(slot=name, instance_id=f"i-{i}", batch=0, block=0, private_ip=f"10.0.0.{i + 9}")
             for i, name in enumerate(CLIENTS[:2])}
SITE_VARS = {"lustre_client_version": "2.15.6", "lustre_client_fs_dns": "fs-1.fsx.us-east-1.amazonaws.com",
             "lustre_client_mount_name": "abcd", "lustre_client_mount_path": "/fsx", "gpufleet_live_system": True,
             "nvidia_driver_version": "570.1", "slurm_version": "24.11"}


@dataclass
class Base:
    calls: int = 0

    def provision_base(self) -> Mapping[str, Instance]:
        self.calls += 1
        return INSTANCES


@dataclass
class Playbooks:
    failing: dict[str, HostStatus] = field(default_factory=dict)
    runs: list[tuple[str, list[str], str, dict]] = field(default_factory=list)

    def run_playbook(self, stage, instances, playbook, extravars) -> StageResult:
        self.runs.append((stage, [i.slot for i in instances], playbook, dict(extravars)))
        return StageResult({i.slot: HostOutcome(i.slot, self.failing.get(i.slot, HostStatus.OK),
                                                "Mount the file system now" if i.slot in self.failing else None)
                            for i in instances})


def test_the_base_comes_up_then_its_clients_are_configured_with_the_lustre_mount():
    base, playbooks = Base(), Playbooks()
    clients = StorageClientsBase(base, playbooks, lambda: storage_client_extravars(SITE_VARS))
    assert clients.inventory() == {}
    assert clients.prepare() == sorted(INSTANCES) and base.calls == 1
    (stage, hosts, playbook, extravars), = playbooks.runs
    assert (stage, hosts, playbook) == ("storage-clients", sorted(INSTANCES), PLAYBOOK)
    assert extravars == {k: v for k, v in SITE_VARS.items() if k.startswith(("lustre_client_", "gpufleet_live"))}
    assert clients.inventory() == INSTANCES  # the storage stage's collector finds them


def test_a_client_that_is_not_configured_stops_before_the_check():
    bad = CLIENTS[1]
    clients = StorageClientsBase(Base(), Playbooks({bad: HostStatus.FAILED}), lambda: storage_client_extravars(SITE_VARS))
    with pytest.raises(ProvisioningError, match=f"1 of 2 storage client.*{bad}: failed at 'Mount the file system now'"
                       ) as err:
        clients.prepare()
    assert err.value.slots == (bad,) and err.value.retryable and clients.inventory() == {}


def test_no_file_system_to_mount_is_refused():
    with pytest.raises(ProvisioningError, match="no file system to mount"):
        storage_client_extravars({k: v for k, v in SITE_VARS.items() if k != "lustre_client_fs_dns"})


def test_stack_hooks_hand_a_real_stacks_storage_clients_to_the_hooks(tmp_path):
    from gpufleet.plan import build_plan
    from gpufleet.rollout.acceptance import stack_hooks
    from gpufleet.rollout.run_config import Adapters
    from gpufleet.rollout.wiring import Wiring

    cloud = FakeCloud()
    clients = Clients(cloud)
    collector = Recording(cloud)
    pool = type("SlurmPool", (), {"kind": "slurm"})()  # its launcher is asked for at the smoke launch only
    wiring = Wiring(Adapters(cloud, cloud, pool, cloud.clock), threaded=True, acceptance=collector,
                    storage_clients=clients)
    plan = build_plan(SPEC)
    collector.plan_storage = plan.storage
    hooks = stack_hooks(SPEC, plan, tmp_path, wiring=wiring)
    assert hooks is not None and hooks.on_hosts and hooks.storage_clients is clients
    # judged at the clients' own bandwidth (c6in.8xlarge, 50 Gbps), not the GPU type's
    assert hooks.runner.storage_client_mbs == 6250
    hooks.runner.journal.append({"type": "rollout", "to": "started", "layout": "x", "batches": [1],
                                 "spare_nodes": 0, "instance_type": SPEC.cluster.instance_type})
    assert hooks.before_batches() is None and collector.calls == [Call("storage", CLIENTS, set())]
    assert hooks.before_batches() is None and len(collector.calls) == 1 and len(clients.prepared) == 1


def test_after_a_storage_change_the_clients_are_prepared_again_and_storage_rechecked_on_them(tmp_path):
    """The base's update applies the change (prepare), then the check runs on the clients; no GPU node moves."""
    cloud = FakeCloud()
    assert rollout(tmp_path, Recording(cloud), Clients(cloud)).run().finished
    bought_before = list(cloud.ledger)
    resized = SPEC.model_copy(update={"storage": SPEC.storage.model_copy(update={"dataset_tib": 3.0})})
    collector, clients = Recording(cloud), Clients(cloud)
    out = rollout(tmp_path, collector, clients, resized).run()
    assert out.finished and collector.stages == ["storage"] and collector.calls[0].nodes == CLIENTS
    assert len(clients.prepared) == 1 and cloud.ledger == bought_before
    assert out.state.acceptance["storage"].attempt == 2
