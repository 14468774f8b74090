"""Per-team access from gpufleet:ops.tenants: on Kubernetes the pool's team queues, RBAC and the
submit-through-queues policy (`gpufleet ops access`); Slurm accounts, QOS capped at the partition's GPU
quota, AllowAccounts, preemption between the teams' priorities."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.errors import ConfigError
from gpufleet.plan import access as acc
from gpufleet.spec import OpsConfig, Tenant

TENANTS = (Tenant(name="vision", partitions=("train", "debug"), members=("ana", "raj")),
           Tenant(name="speech", partitions=("train",)))


def test_the_command_writes_the_pools_team_queues_rbac_and_policy_for_a_kubernetes_stack(tmp_path: Path) -> None:
    """`ops access` on Kubernetes is the pool's own per-team layout (a namespace, LocalQueue and
    ClusterQueue `<partition>-<team>`, the team's Role only there, the submit-through-queues policy),
    not one shared LocalQueue per partition; every Kueue object valid under the shipped CRDs and CEL."""
    import kubernetes_validate

    from gpufleet.pool.kubernetes.submission_policy import POLICY
    from tests.pool.kueue_schema import validate_kueue
    from tests.rollout.project import REPO, make_project

    project = make_project(tmp_path / "project")
    doc = yaml.safe_load((REPO / "stacks" / "Pulumi.prod.yaml").read_text())
    doc["config"]["gpufleet:ops"] = {**doc["config"].get("gpufleet:ops", {}), "tenants": [
        {"name": "vision", "partitions": ["train", "debug"], "quotaUnits": {"train": 50}},
        {"name": "lang", "partitions": ["train"]}]}
    (project / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump(doc))
    out = CliRunner().invoke(main, ["--project", str(project), "ops", "access", "-s", "prod", "--out", str(tmp_path / "a")])
    assert out.exit_code == 0, out.output
    objs = list(yaml.safe_load_all((tmp_path / "a" / "kubernetes-access.yaml").read_text()))
    by = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}
    for ns in ("train-vision", "debug-vision", "train-lang"):
        assert {("Namespace", None, ns), ("LocalQueue", ns, ns), ("ClusterQueue", None, ns)} <= by, ns
        assert ("RoleBinding", ns, f"gpufleet-team-{ns.split('-')[1]}") in by
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "Role"}
    assert roles == {("train-vision", "gpufleet-team-vision"), ("debug-vision", "gpufleet-team-vision"),
                     ("train-lang", "gpufleet-team-lang")}  # never the partition's or another team's namespace
    assert ("ValidatingAdmissionPolicy", None, POLICY) in by
    cq = next(o for o in objs if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "train-vision")
    gpus = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert gpus["nvidia.com/gpu"] == 500  # vision's 50 units of train
    for o in objs:
        if o["apiVersion"].startswith("kueue.x-k8s.io/"):
            validate_kueue(o)
        else:
            kubernetes_validate.validate(o, doc["config"].get("gpufleet:pool", {}).get("kubernetesVersion", "1.33"),
                                         strict=True)
    teams = json.loads((tmp_path / "a" / "teams.json").read_text())
    vision_debug = next(t for t in teams if t["namespace"] == "debug-vision")
    assert vision_debug["group"] == "gpufleet:vision"
    assert vision_debug["labels"]["kueue.x-k8s.io/queue-name"] == "debug-vision"
    assert vision_debug["labels"]["kueue.x-k8s.io/priority-class"] == "gpufleet-debug"
    assert "kueue.x-k8s.io/max-exec-time-seconds" in vision_debug["labels"]  # debug's run-time cap


def test_slurm_accounts_qos_capped_at_the_partition_quota_and_allow_accounts() -> None:
    cmds = acc.sacctmgr_commands(TENANTS, [acc.PartitionQuota("train", 640), acc.PartitionQuota("sim", 200),
                                           acc.PartitionQuota("debug", 40)], "local")
    text = [shlex.join(c) for c in cmds]
    assert "sacctmgr -i add qos vision-debug GrpTRES=gres/gpu=40 'Description=team vision on partition debug'" in text
    assert any(t.startswith("sacctmgr -i add account speech Cluster=local") and "QOS=speech-train" in t for t in text)
    # the two members, and root in the patrol's account (its holds: `pool.slurm.patrol_hold`)
    assert sum(t.startswith("sacctmgr -i add user") for t in text) == 3
    assert "sacctmgr -i add user root Account=gpufleet-patrol Cluster=local" in text
    assert acc.allow_accounts(TENANTS, ["train", "sim", "debug"]) == {
        "train": "root,gpufleet-patrol,speech,vision", "sim": "root,gpufleet-patrol",
        "debug": "root,gpufleet-patrol,vision"}


def test_a_tenant_naming_an_unknown_partition_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="partition 'gpu'"):
        acc.allow_accounts((Tenant(name="x", partitions=("gpu",)),), ["train"])
    with pytest.raises(ConfigError, match="twice"):
        acc.allow_accounts((TENANTS[1], TENANTS[1]), ["train"])


def test_the_command_writes_the_slurm_files_for_a_stack_with_tenants(tmp_path: Path) -> None:
    from tests.rollout.project import make_project

    project = make_project(tmp_path / "project")
    stack = project / "stacks" / "Pulumi.crash40.yaml"
    doc = yaml.safe_load(stack.read_text())
    parts = [p["name"] for p in doc["config"]["gpufleet:partitions"]]
    doc["config"]["gpufleet:ops"] = {"tenants": [{"name": "vision", "partitions": parts[:1], "members": ["ana"]}]}
    stack.write_text(yaml.safe_dump(doc))
    out = CliRunner().invoke(main, ["--project", str(project), "ops", "access", "-s", "crash40", "--out", str(tmp_path / "a")])
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "a" / "allow-accounts.json").read_text())[parts[0]] == "root,gpufleet-patrol,vision"
    assert "add user ana Account=vision" in (tmp_path / "a" / "sacctmgr.sh").read_text()
    doc["config"]["gpufleet:ops"] = {"tenants": [{"name": "vision", "partitions": ["nope"]}]}
    stack.write_text(yaml.safe_dump(doc))
    bad = CliRunner().invoke(main, ["--project", str(project), "ops", "access", "-s", "crash40", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "nope" in bad.output and not (tmp_path / "b").exists()


def test_ops_config_refuses_an_inverted_operating_range() -> None:
    with pytest.raises(ValueError, match="utilMinPercent"):
        OpsConfig(util_min_percent=90, util_max_percent=70)


def test_access_changes_run_only_what_slurmdbd_lacks() -> None:
    from gpufleet.pool.slurm.access_apply import parse_existing

    quotas = [acc.PartitionQuota("train", 640), acc.PartitionQuota("sim", 200), acc.PartitionQuota("debug", 40)]
    want = acc.slurm_access(TENANTS, quotas, "local")
    everything = acc.sacctmgr_commands(TENANTS, quotas, "local")
    assert ["sacctmgr", "-i", "add", "qos", "part-debug", "GrpTRES=gres/gpu=40",
            "Description=partition debug: every account's jobs together"] in everything
    # what sacctmgr -n -P prints once the script ran, one limit edited by hand and one user gone
    qos = "\n".join(f"{q.name}|{'' if q.gpus is None else f'gres/gpu={q.gpus}'}|"
                    f"{q.priority}|{','.join(q.preempt)}" for q in want.qos).replace("part-sim|gres/gpu=200", "part-sim|gres/gpu=8")
    assocs = "\n".join([f"{a.name}||{','.join(reversed(a.qos))}|{a.default_qos}" for a in want.accounts]
                       + [f"{a}|{u}||" for u, a in want.users[1:]] + ["root||normal|normal", "root|root|normal|"])
    have = parse_existing("local\n", qos, assocs)
    user, account = want.users[0]
    assert acc.access_changes(want, have) == [
        ["sacctmgr", "-i", "modify", "qos", "where", "name=part-sim", "set", "GrpTRES=gres/gpu=200"],
        ["sacctmgr", "-i", "add", "user", user, f"Account={account}", "Cluster=local"]]
    fixed = parse_existing("local\n", qos.replace("part-sim|gres/gpu=8", "part-sim|gres/gpu=200"),
                           assocs + f"\n{account}|{user}||")
    assert acc.access_changes(want, fixed) == []


def test_allow_qos_binds_each_partition_to_its_teams_qos() -> None:
    assert acc.partition_allow_qos(TENANTS, ["train", "sim", "debug"]) == {
        "train": "normal,gpufleet-patrol,speech-train,vision-train", "sim": "normal,gpufleet-patrol",
        "debug": "normal,gpufleet-patrol,vision-debug"}
    assert acc.default_qos(TENANTS)[("vision", "debug")] == "vision-debug"


def test_with_preemption_a_team_qos_preempts_only_its_partitions_lower_teams() -> None:
    from gpufleet.pool.slurm.access_apply import parse_existing

    teams = (Tenant(name="bulk", partitions=("train", "debug")), Tenant(name="urgent", partitions=("debug",), priority=10),
             Tenant(name="ops", partitions=("debug",), priority=10))
    assert acc.preempt_lists(teams, "debug") == {"bulk-debug": (), "urgent-debug": ("bulk-debug",),
                                                 "ops-debug": ("bulk-debug",)}  # equals never preempt
    assert acc.preempt_lists(teams, "train") == {"bulk-train": ()}
    quotas = [acc.PartitionQuota("train", 640, capacity_gpus=640), acc.PartitionQuota("debug", 10, capacity_gpus=40)]
    cmds = acc.sacctmgr_commands(teams, quotas, "local", preemption=True)
    # train's quota is its capacity: no limit of its own (Slurm never preempts for a QOS limit);
    # debug's quota is below it and stays
    assert ["sacctmgr", "-i", "add", "qos", "part-train", "Description=partition train: every account's jobs together"] in cmds
    assert ["sacctmgr", "-i", "add", "qos", "part-debug", "GrpTRES=gres/gpu=10",
            "Description=partition debug: every account's jobs together"] in cmds
    add_urgent = ["sacctmgr", "-i", "add", "qos", "urgent-debug", "GrpTRES=gres/gpu=10",
                  "Description=team urgent on partition debug", "Priority=10"]
    preempt = ["sacctmgr", "-i", "modify", "qos", "where", "name=urgent-debug", "set",
               "Preempt=bulk-debug,gpufleet-patrol"]
    assert cmds.index(add_urgent) < cmds.index(preempt)  # every QOS exists before a Preempt= names it
    assert acc.sacctmgr_commands(teams, quotas, "local") == acc.sacctmgr_commands(teams, quotas, "local", False)
    # without preemption no priorities, and every QOS (root's normal too) preempts the patrol's holds only
    off = [" ".join(c) for c in acc.sacctmgr_commands(teams, quotas, "local")]
    assert not any("Priority=" in c for c in off)
    assert sorted(c.split("name=")[1] for c in off if "Preempt" in c) == [
        f"{n} set Preempt=gpufleet-patrol" for n in ("bulk-debug", "bulk-train", "normal", "ops-debug", "urgent-debug")]
    # read back as `sacctmgr -n -P show qos format=name,grptres,priority,preempt` prints it
    want = acc.slurm_access(teams, quotas, "local", preemption=True)
    qos = "\n".join(f"{q.name}|{'' if q.gpus is None else f'gres/gpu={q.gpus}'}|{q.priority}|{','.join(q.preempt)}"
                    for q in want.qos)
    assocs = "\n".join([f"{a.name}||{','.join(a.qos)}|{a.default_qos}" for a in want.accounts]
                       + [f"{a}|{u}||" for u, a in want.users])
    assert acc.access_changes(want, parse_existing("local\n", qos, assocs)) == []
    edited = qos.replace("urgent-debug|gres/gpu=10|10|bulk-debug,gpufleet-patrol", "urgent-debug|gres/gpu=10|3|").replace(
        "part-train||0|", "part-train|gres/gpu=640|0|")
    assert acc.access_changes(want, parse_existing("local\n", edited, assocs)) == [
        ["sacctmgr", "-i", "modify", "qos", "where", "name=part-train", "set", "GrpTRES=gres/gpu=-1"],
        ["sacctmgr", "-i", "modify", "qos", "where", "name=urgent-debug", "set", "Priority=10"],
        ["sacctmgr", "-i", "modify", "qos", "where", "name=urgent-debug", "set", "Preempt=bulk-debug,gpufleet-patrol"]]
