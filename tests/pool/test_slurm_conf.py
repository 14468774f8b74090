"""The generated Slurm configuration, pure: what the plan says must be what Slurm is told."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpufleet.errors import ConfigError, PoolError
from gpufleet.plan import build_plan
from gpufleet.pool.slurm.conf import (LocalFlavour, RealFlavour, generate, hostlist, nodes_for_units, priority_tiers,
                                   topology_kind, unit_request_args)
from gpufleet.spec import load_stack

from .conftest import small_spec

REAL = RealFlavour(controller_host="slurm-head", controller_address="10.0.16.10")


def _lines(text: str, key: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(key + "=")]


def _expand(hosts: str) -> list[str]:
    """Inverse of hostlist() for the forms it writes (prefix[a-b] and single names)."""
    out = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]+\])?", hosts):
        m = re.match(r"^(.*)\[(\d+)-(\d+)\]$", part)
        if m:
            width = len(m.group(2))
            out += [f"{m.group(1)}{i:0{width}d}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
        else:
            out.append(part)
    return out


def test_hostlist_compresses_runs_and_round_trips():
    names = ["a-b0000-n00000", "a-b0000-n00001", "a-b0000-n00002", "a-b0001-n00005", "x", "a-b0000-n00009"]
    text = hostlist(names)
    assert text == "a-b0000-n[00000-00002],a-b0001-n00005,x,a-b0000-n00009"
    assert _expand(text) == names


def test_topology_follows_the_version():
    assert topology_kind("22.05.8") == "tree" and topology_kind("23.02") == "tree"
    assert topology_kind("23.11.0") == "block" and topology_kind("24.11.6") == "block"
    with pytest.raises(ConfigError, match="slurmVersion"):
        topology_kind("latest")


def test_the_local_stack_on_slurm_24_11_real_flavour():
    spec = load_stack("local")
    plan = build_plan(spec)
    cfg = generate(spec, plan, REAL, "24.11.6")
    conf = cfg.slurm_conf
    assert "TopologyPlugin=topology/block" in conf and "AuthType=auth/munge" in conf
    assert "SlurmctldHost=slurm-head(10.0.16.10)" in conf and "auth/none" not in conf
    # the security groups open exactly these ports (infra/gpufleet/cloud/network.py imports them from conf.py)
    assert "SlurmctldPort=6817" in conf and "SlurmdPort=6818" in conf and "SrunPortRange=60001-63000" in conf
    nodes = _lines(conf, "NodeName")
    assert len(nodes) == plan.topology.blocks
    listed = [n for line in nodes for n in _expand(line.split()[0].split("=", 1)[1])]
    assert listed == [n.name for n in plan.nodes]
    for line in nodes:  # real CPU/memory/GPUs of p5.48xlarge from the catalog; drained until gated
        assert "CPUs=192" in line and "Gres=gpu:h100:8" in line and 'State=DRAIN Reason="gpufleet: pending gates"' in line
        assert int(re.search(r"RealMemory=(\d+)", line).group(1)) < 2048 * 1024
        # the catalog's CPU topology, not CPUs alone (slurmd would infer Sockets=192)
        assert "Sockets=2 CoresPerSocket=48 ThreadsPerCore=2" in line
        # no Weight: 22.05's tree selection makes the lowest-weight nodes required and pinned a unit
        # job to a lone free node of block 0 (tests/pool/test_slurm_units.py shows the job start in block 1)
        assert "Weight=" not in line
    parts = {re.search(r"PartitionName=(\S+)", ln).group(1): ln for ln in _lines(conf, "PartitionName")}
    assert set(parts) == {"train", "sim", "debug", "gpufleet-gates"}
    # gpufleet's own gate runs: every node, hidden from sinfo, never the default, lowest tier
    gates = parts.pop("gpufleet-gates")
    assert "Nodes=ALL Hidden=YES PriorityTier=1" in gates and "Default=NO" in gates
    for p in plan.partitions:
        expected = [plan.nodes[i].name for b in p.blocks for i in plan.blocks[b].nodes]
        assert _expand(re.search(r"Nodes=(\S+)", parts[p.name]).group(1)) == expected
        assert f"PriorityTier={p.priority}" in parts[p.name]
    assert "MaxTime=60" in parts["debug"] and "MaxTime=INFINITE" in parts["train"]
    assert "MaxNodes=5" in parts["debug"]  # 4 units of 10 GPUs = one 5-node block
    blocks = _lines(cfg.topology_conf, "BlockName")
    assert len(blocks) == plan.topology.blocks and "BlockSizes=5" in cfg.topology_conf
    assert cfg.gres_conf.strip().endswith("Name=gpu Type=h100 File=/dev/nvidia[0-7]")


def test_tree_topology_and_local_flavour(tmp_path: Path):
    spec = small_spec()
    plan = build_plan(spec)
    cfg = generate(spec, plan, LocalFlavour(root=tmp_path, controller_port=30000, first_node_port=30001), "22.05.8")
    assert cfg.topology == "tree" and "TopologyPlugin=topology/tree" in cfg.slurm_conf
    assert "AuthType=auth/none" in cfg.slurm_conf and "SlurmctldPort=30000" in cfg.slurm_conf
    assert f"StateSaveLocation={tmp_path}/state" in cfg.slurm_conf
    assert "Port=[30001-30005]" in cfg.slurm_conf and "Port=[30011-30015]" in cfg.slurm_conf
    switches = _lines(cfg.topology_conf, "SwitchName")
    assert switches[0] == "SwitchName=block0000 Nodes=local-b0000-n[00000-00004]"
    assert switches[-1] == "SwitchName=fabric Switches=block[0000-0002]"
    assert f"File={tmp_path}/fakedev/nvidia[0-7]" in cfg.gres_conf


def test_max_time_override_and_unknown_partition():
    spec = small_spec(slurmMaxMinutes={"train": 720})
    cfg = generate(spec, build_plan(spec), REAL, "24.11")
    assert re.search(r"PartitionName=train .*MaxTime=720", cfg.slurm_conf)
    bad = small_spec(slurmMaxMinutes={"nope": 5})
    with pytest.raises(ConfigError, match="nope"):
        generate(bad, build_plan(bad), REAL, "24.11")


def test_priority_tiers_keep_order_beyond_16_bits():
    from gpufleet.plan.model import PartitionAllocation

    def alloc(name: str, prio: int) -> PartitionAllocation:
        return PartitionAllocation(name=name, mode="independent", requested_units=1, units=1, blocks=(0,), gpus=10,
                                   priority=prio, quota_units=None)

    assert priority_tiers([alloc("a", 10), alloc("b", 100)]) == {"a": 10, "b": 100}
    assert priority_tiers([alloc("a", 10), alloc("b", 1_000_000), alloc("c", 70_000)]) == {"a": 1, "b": 3, "c": 2}


def test_unit_requests_stay_in_one_block():
    plan = build_plan(load_stack("local"))  # 10-GPU units, 5-node blocks of 4 units
    assert nodes_for_units(plan, 1) == 2 and nodes_for_units(plan, 4) == 5 and nodes_for_units(plan, 8) == 10
    assert unit_request_args(plan, "sim", 1, "tree") == ["--partition=sim", "--nodes=2", "--gpus=10", "--switches=1"]
    assert unit_request_args(plan, "sim", 3, "block") == ["--partition=sim", "--nodes=4", "--gpus=30", "--segment=4"]
    assert unit_request_args(plan, "train", 8, "block") == [
        "--partition=train", "--nodes=10", "--gpus-per-node=8", "--exclusive", "--segment=5"]
    with pytest.raises(PoolError, match="whole blocks"):
        unit_request_args(plan, "train", 6, "tree")
    with pytest.raises(PoolError, match="not in the plan"):
        unit_request_args(plan, "inference", 1, "tree")
    with pytest.raises(PoolError, match="at least one unit"):
        unit_request_args(plan, "sim", 0, "tree")


def test_real_config_files_and_role_extravars(tmp_path: Path):
    import shutil

    from gpufleet.configure.extravars import check_no_secrets
    from gpufleet.pool.slurm.files import write_slurm_config
    from gpufleet.project import load_project

    repo = Path(__file__).resolve().parents[2]
    for name in ("Pulumi.yaml",):
        shutil.copy(repo / name, tmp_path / name)
    shutil.copytree(repo / "stacks", tmp_path / "stacks")
    shutil.copytree(repo / "images", tmp_path / "images")
    project = load_project(tmp_path)
    spec = load_stack("dev", project.stacks_dir)
    ev = write_slurm_config(spec, build_plan(spec), project, "dev", "10.0.16.10")
    check_no_secrets(ev)
    assert ev["slurm_version"] == "24.11.6"  # the BOM's pin for the stack's OS
    conf = Path(ev["slurm_conf_file"]).read_text()
    assert conf.startswith("# gpufleet: generated") and "SlurmctldHost=ip-10-0-16-10(10.0.16.10)" in conf
    assert Path(ev["slurm_conf_file"]).parent == project.state_dir("dev") / "slurm-config"
    assert "BlockName=" in Path(ev["slurm_topology_conf_file"]).read_text()
    defaults = (repo / "playbooks/roles/slurm/defaults/main.yml").read_text()
    for key in ev:  # every extravar is one of the role's documented inputs
        assert f"\n{key}:" in defaults, key


def _with_ops(spec, **ops: object):
    from gpufleet.spec import ClusterSpec

    raw = spec.model_dump(by_alias=True, mode="json", exclude_none=True)
    raw["ops"] = {**raw.get("ops", {}), **ops}
    return ClusterSpec.from_raw(raw, source="tests/pool/test_slurm_conf.py")


TEAMS = [{"name": "vision", "partitions": ["train"], "members": ["ana"]},
         {"name": "speech", "partitions": ["train", "debug"]}]


def test_partitions_allow_their_tenants_accounts_and_accounting_enforces_them():
    spec = _with_ops(small_spec(), tenants=TEAMS, slurmAccounting=True)
    conf = generate(spec, build_plan(spec), REAL, "24.11.6").slurm_conf
    parts = {re.search(r"PartitionName=(\S+)", ln).group(1): ln for ln in _lines(conf, "PartitionName")}
    assert "AllowAccounts=root,gpufleet-patrol,speech,vision " in parts["train"]  # the patrol's holds too
    assert "AllowAccounts=root,gpufleet-patrol,speech " in parts["debug"]
    assert _lines(conf, "EnforcePartLimits") == ["EnforcePartLimits=ALL"]
    assert _lines(conf, "AccountingStorageEnforce") == ["AccountingStorageEnforce=associations,limits,qos"]
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "AccountingStorageHost=slurm-head" in conf and "AccountingStoragePort=6819" in conf
    assert "AccountingStorageTRES=gres/gpu" in conf  # the TRES the teams' QOS GrpTRES counts
    # each key once: a second AccountingStorageType (the no-accounting default) would win silently
    keys = [ln.split("=", 1)[0] for ln in conf.splitlines() if "=" in ln and not ln.startswith(("NodeName", "Partition"))]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_without_tenants_partitions_stay_open_and_accounting_off():
    conf = generate(small_spec(), build_plan(small_spec()), REAL, "24.11.6").slurm_conf
    assert "AllowAccounts" not in conf and "AccountingStorageType=accounting_storage/none" in conf
    assert "AccountingStorageEnforce" not in conf and "EnforcePartLimits=ALL" in conf


def test_tenants_without_accounting_or_naming_unknown_partitions_are_refused(tmp_path: Path):
    spec = _with_ops(small_spec(), tenants=TEAMS)
    with pytest.raises(ConfigError, match="need accounting") as err:
        generate(spec, build_plan(spec), REAL, "24.11.6")
    assert err.value.field == "gpufleet:ops.slurmAccounting"
    spec = _with_ops(small_spec(), tenants=[{"name": "nlp", "partitions": ["inference"]}], slurmAccounting=True)
    with pytest.raises(ConfigError, match="inference"):
        generate(spec, build_plan(spec), REAL, "24.11.6")
    local = LocalFlavour(root=tmp_path, controller_port=30000, first_node_port=30001)
    spec = _with_ops(small_spec(), slurmAccounting=True)
    with pytest.raises(PoolError, match="slurmdbd port"):
        generate(spec, build_plan(spec), local, "22.05.8")
    conf = generate(spec, build_plan(spec), LocalFlavour(root=tmp_path, controller_port=30000, first_node_port=30001,
                                                         slurmdbd_port=30100), "22.05.8").slurm_conf
    assert "AccountingStorageHost=localhost" in conf and "AccountingStoragePort=30100" in conf


def test_every_catalog_entry_declares_a_cpu_topology_that_makes_its_vcpus():
    from gpufleet.catalog import CATALOG

    for t in CATALOG.values():
        assert t.sockets * t.cores_per_socket * t.threads_per_core == t.vcpus, t.name
    p5 = CATALOG["p5.48xlarge"]
    assert (p5.sockets, p5.cores_per_socket, p5.threads_per_core) == (2, 48, 2)


def test_block_sizes_are_the_plans_block_and_its_power_of_two_aggregates():
    from gpufleet.pool.slurm.conf import block_sizes

    plan = build_plan(load_stack("local-slurm"))  # 25 blocks of 5 nodes
    assert block_sizes(plan) == [5, 10, 20, 40, 80]
    cfg = generate(load_stack("local-slurm"), plan, RealFlavour(controller_host="h", controller_address="10.0.16.10"),
                   "24.11.6")
    assert "BlockSizes=5,10,20,40,80" in cfg.topology_conf and "JobSubmitPlugins=lua" in cfg.slurm_conf
    assert "local TREE = false" in cfg.files()["job_submit.lua"]


def test_preemption_is_by_the_teams_qos_only_where_the_stack_asks_for_it():
    teams = [{"name": "bulk", "partitions": ["train", "debug"]}, {"name": "urgent", "partitions": ["debug"], "priority": 10}]
    spec = _with_ops(small_spec(preemption="requeue"), tenants=teams, slurmAccounting=True)
    conf = generate(spec, build_plan(spec), REAL, "24.11.6").slurm_conf
    assert _lines(conf, "PreemptType") == ["PreemptType=preempt/qos"]
    assert _lines(conf, "PreemptMode") == ["PreemptMode=REQUEUE"]
    assert _lines(conf, "PriorityWeightQOS") == ["PriorityWeightQOS=10000"]
    off = _with_ops(small_spec(), tenants=teams, slurmAccounting=True)
    # off: preempt/qos only for the patrol's holds (the one QOS any Preempt= names), which it cancels
    conf = generate(off, build_plan(off), REAL, "24.11.6").slurm_conf
    assert [ln for ln in conf.splitlines() if ln.startswith("Preempt")] == ["PreemptType=preempt/qos", "PreemptMode=CANCEL"]
    assert "Priority" not in conf.split("PartitionName")[0]
    # without accounting there is no QOS to preempt by: nothing
    bare = small_spec()
    assert "Preempt" not in generate(bare, build_plan(bare), REAL, "24.11.6").slurm_conf
    # nothing to preempt between: every team of one priority, or no teams at all
    same = _with_ops(small_spec(preemption="cancel"), tenants=[{"name": "bulk", "partitions": ["debug"]}],
                     slurmAccounting=True)
    with pytest.raises(ConfigError, match="different priorities") as err:
        generate(same, build_plan(same), REAL, "24.11.6")
    assert err.value.field == "gpufleet:pool.preemption"


def test_a_real_head_node_gets_partition_qos_that_the_accounting_role_creates_before_slurmctld():
    """slurmctld is fatal on a partition QOS slurmdbd lacks: the real slurm.conf names them, the
    slurm_accounting role gets their names and starts slurmctld after creating them, and the slurm
    role leaves slurmctld alone on such a head node (the role test runs the helper for real)."""
    import yaml

    from gpufleet.pool.slurm.files import accounting_extravars

    spec = _with_ops(small_spec(), tenants=TEAMS, slurmAccounting=True)
    plan = build_plan(spec)
    conf = generate(spec, plan, REAL, "24.11.6").slurm_conf
    parts = {re.search(r"PartitionName=(\S+)", ln).group(1): ln for ln in _lines(conf, "PartitionName")}
    assert " QOS=part-train " in parts["train"] and " QOS=part-debug " in parts["debug"]
    assert accounting_extravars(spec, plan) == {"slurm_accounting_partition_qos": ["part-train", "part-debug"]}
    assert accounting_extravars(small_spec(), build_plan(small_spec())) == {}
    assert "QOS=" not in generate(small_spec(), build_plan(small_spec()), REAL, "24.11.6").slurm_conf
    repo = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
    tasks = [t["name"] for t in yaml.safe_load((repo / "slurm_accounting/tasks/main.yml").read_text())]
    assert tasks.index("Register the cluster with slurmdbd") < tasks.index("Create the partition QOS slurm.conf names") \
        < tasks.index("Run slurmctld once slurmdbd holds the cluster and its QOS") == len(tasks) - 1
    run = next(t for t in yaml.safe_load((repo / "slurm/tasks/configure.yml").read_text())
               if t["name"].startswith("Run the Slurm daemon"))
    assert "slurm_started_by_accounting" in run["ansible.builtin.systemd_service"]["state"]
    assert run["vars"]["slurm_started_by_accounting"] == (
        "{{ slurm_role == 'controller' and slurm_accounting_cluster | default('') | length > 0 }}")


def test_the_patrols_holds_are_let_in_with_accounting_only():
    """Issue 22 item 6: the patrol QOS (Priority 0, preempted by every other QOS) is allowed on every
    partition, and job_submit.lua lets its one-node holds past the whole-unit rule; without
    accounting no QOS is enforced, so no job may pass the rule by naming it."""
    spec = _with_ops(small_spec(), tenants=TEAMS, slurmAccounting=True)
    cfg = generate(spec, build_plan(spec), REAL, "24.11.6")
    parts = [ln for ln in _lines(cfg.slurm_conf, "PartitionName") if "gpufleet-gates" not in ln]
    assert parts and all("AllowQos=normal,gpufleet-patrol" in ln for ln in parts), parts
    lua = cfg.files()["job_submit.lua"]
    assert 'local PATROL_QOS = "gpufleet-patrol"' in lua
    assert lua.index("job.qos == PATROL_QOS") < lua.index("if UNIT_PARTITIONS[name]")
    bare = small_spec()
    lua = generate(bare, build_plan(bare), REAL, "24.11.6").files()["job_submit.lua"]
    assert "local PATROL_QOS = nil" in lua


def test_the_local_spool_keeps_slurmstepd_socket_paths_under_sun_paths_limit(tmp_path):
    """slurmstepd's sockets are `<spool>/<node>/<node>_<job>.<step>`: under a long state dir they
    passed 108 bytes at job 100 ("Unix socket path ... is too long. (109 > 108)") and every srun
    failed. A long state dir's spool is a short folder under /tmp, named by the dir's hash."""
    from gpufleet.pool.slurm.conf import SOCKET_PATH_MAX, LocalFlavour, socket_path_length

    long_root = tmp_path / ("x" * 40) / ".gpufleet" / "local-slurm" / "slurm"
    node = "local-slurm-b0018-n00092"
    assert socket_path_length(long_root / "spool", node) > SOCKET_PATH_MAX  # the old layout: too long
    spool = LocalFlavour(root=long_root, controller_port=1, first_node_port=2).spool
    assert str(spool).startswith("/tmp/gpufleet-spool-") and socket_path_length(spool, node) <= SOCKET_PATH_MAX
    assert spool == LocalFlavour(root=long_root, controller_port=3, first_node_port=4).spool  # stable per root
    assert spool != LocalFlavour(root=long_root.parent / "other", controller_port=1, first_node_port=2).spool
    short = Path("/tmp/ls/.gpufleet/x/slurm")
    assert LocalFlavour(root=short, controller_port=1, first_node_port=2).spool == short / "spool"
