"""Static hosts (an inventory of machines that exist already) and what a rollout over them needs
from the gates and the pool: the inventory's checks, the Provisioner port's answers, the stack's
`pool.srunMpi` in the multi-node launch specs, and slurm.conf for slurmd that run on those hosts.

The real thing (8 network-namespace hosts rolled out by the orchestrator) is
tests/integration/test_rehearsal.py; these are the pure parts, in milliseconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet import catalog
from gpufleet.errors import ConfigError, PoolError, ProvisioningError
from gpufleet.gates.launch import launch_spec
from gpufleet.gates.settings import GateSettings
from gpufleet.plan import plan_stack
from gpufleet.pool.slurm.conf import LocalFlavour, generate
from gpufleet.rollout.baselines import NetworkRunner
from gpufleet.rollout.static_hosts import StaticHostsProvisioner, parse_inventory
from gpufleet.spec import ClusterSpec, load_stack_path

STACK_FILE = Path(__file__).resolve().parents[1] / "integration" / "Pulumi.rehearsal.yaml"


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    return load_stack_path(STACK_FILE)


@pytest.fixture(scope="module")
def plan(spec):
    return plan_stack(spec)


def _inventory(plan, count: int | None = None) -> dict:
    return {"hosts": [{"slot": n.name, "address": f"192.0.2.{10 + i}"} for i, n in enumerate(plan.nodes[:count])]}


def test_the_inventory_gives_each_slot_its_host_batch_and_block(plan, tmp_path):
    path = tmp_path / "hosts.yaml"
    data = _inventory(plan)
    data["hosts"][0]["instanceId"] = "rack4-u12"
    path.write_text(yaml.safe_dump(data))
    p = StaticHostsProvisioner.from_file(path, plan)
    first, second = plan.nodes[0], plan.nodes[1]
    assert p.hosts[first.name].instance_id == "rack4-u12" and p.hosts[first.name].private_ip == "192.0.2.10"
    assert p.hosts[second.name].instance_id == f"static-{second.name}"
    assert all((p.hosts[n.name].batch, p.hosts[n.name].block) == (n.batch, n.block) for n in plan.nodes)


def test_provision_answers_from_the_inventory_and_reports_missing_hosts_as_shortfall(plan):
    p = StaticHostsProvisioner(parse_inventory(_inventory(plan, count=7), plan, "hosts.yaml"), "hosts.yaml")
    batch2 = [n for n in plan.nodes if n.batch == 2]
    result = p.provision(2, batch2)
    assert sorted(result.instances) == [n.name for n in batch2[:-1]]
    assert result.shortfall == {batch2[-1].name: "no host for this slot in the inventory hosts.yaml"}
    assert p.provision(2, batch2) == result  # idempotent: the same hosts again
    assert set(p.inventory()) == {n.name for n in plan.nodes[:7]}


def test_a_static_host_is_never_replaced_by_software(plan):
    p = StaticHostsProvisioner(parse_inventory(_inventory(plan), plan, "hosts.yaml"), "hosts.yaml")
    with pytest.raises(ProvisioningError, match=r"192\.0\.2\.10.*cannot be replaced") as err:
        p.replace(plan.nodes[0], "terminate")
    assert err.value.slots == (plan.nodes[0].name,)


@pytest.mark.parametrize("mutate, field, message", [
    (lambda d: d.update(hosts=[]), "hosts", "lists no hosts"),
    (lambda d: d["hosts"][1].update(slot="nobody-b0000-n00000"), "hosts[1].slot", "not in the plan"),
    (lambda d: d["hosts"][2].update(slot=d["hosts"][0]["slot"]), "hosts[2].slot", "listed twice"),
    (lambda d: d["hosts"][3].update(address="192.0.2.10"), "hosts[3].address", "already slot"),
    (lambda d: d["hosts"][4].update(address=" "), "hosts[4].address", "empty address"),
    (lambda d: d["hosts"][5].update(user="root"), "hosts[5]", "not a host"),
    (lambda d: d["hosts"][6].pop("address"), "hosts[6]", "not a host"),
])
def test_a_bad_inventory_names_file_entry_and_what_was_expected(plan, mutate, field, message):
    data = _inventory(plan)
    mutate(data)
    with pytest.raises(ConfigError, match=message) as err:
        parse_inventory(data, plan, "hosts.yaml")
    assert err.value.path == "hosts.yaml" and err.value.field == field and err.value.expected


def test_an_unreadable_inventory_is_a_config_error(plan, tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read the host inventory") as err:
        StaticHostsProvisioner.from_file(path, plan)
    assert err.value.path == str(path)


def test_srun_mpi_comes_from_the_settings_into_every_round(spec):
    sku = catalog.get("p5.48xlarge")
    assert "--mpi=pmix" in launch_spec("slurm", ["a", "b"], sku, {}).argv  # a real cluster's PMIx
    assert spec.pool.srun_mpi == "none"  # the rehearsal's Debian Slurm has no PMIx

    class Recorder:
        def __init__(self) -> None:
            self.specs: list = []

        def run(self, specs, timeout_s):
            self.specs.extend(specs)
            return []

    launcher = Recorder()
    runner = NetworkRunner(launcher, "slurm", GateSettings(srun_mpi=spec.pool.srun_mpi), {}, 2**30)
    with pytest.raises(PoolError, match="returned 0 results for 2 runs"):
        runner.round([("a", "b"), ("c", "d")])
    assert [s.argv.count("--mpi=none") for s in launcher.specs] == [1, 1]
    assert not any(a.startswith("--mpi=pmix") for s in launcher.specs for a in s.argv)


def test_srun_mpi_refuses_what_slurm_has_no_plugin_for():
    from gpufleet.spec import PoolConfig

    assert PoolConfig(type="slurm").srun_mpi == "pmix"
    assert PoolConfig(type="slurm", srun_mpi="pmix_v5").srun_mpi == "pmix_v5"
    with pytest.raises(ValueError):
        PoolConfig(type="slurm", srun_mpi="openmpi; rm -rf /")


def test_slurmd_on_their_own_hosts_get_their_addresses_and_the_controllers(spec, plan, tmp_path):
    addresses = {n.name: f"10.213.7.{10 + i}" for i, n in enumerate(plan.nodes)}
    flavour = LocalFlavour(root=tmp_path, controller_port=30000, first_node_port=30001,
                           controller_address="10.213.7.1", node_addresses=addresses)
    conf = generate(spec, plan, flavour, "22.05.8").slurm_conf
    assert "SlurmctldHost=localhost(10.213.7.1)" in conf.splitlines()
    for i, n in enumerate(plan.nodes):
        line = next(ln for ln in conf.splitlines() if ln.startswith(f"NodeName={n.name} "))
        assert f" NodeHostname={n.name} NodeAddr={addresses[n.name]} Port={30001 + i} " in line
    loopback = generate(spec, plan, LocalFlavour(root=tmp_path, controller_port=30000, first_node_port=30001),
                        "22.05.8").slurm_conf
    assert "SlurmctldHost=localhost" in loopback.splitlines() and "NodeAddr=127.0.0.1" in loopback
