"""Per-team access from gpufleet:ops.tenants: Kubernetes Roles, bindings and the LocalQueue-only
admission policy; Slurm accounts, QOS capped at the partition's GPU quota, AllowAccounts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import celpy
import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.errors import ConfigError
from gpufleet.plan import access as acc
from gpufleet.spec import OpsConfig, Tenant

TENANTS = (Tenant(name="vision", partitions=("train", "debug"), members=("ana", "raj")),
           Tenant(name="speech", partitions=("train",)))


def test_kubernetes_teams_get_roles_only_in_their_partitions_and_no_queue_creation() -> None:
    objs = acc.kubernetes_objects(TENANTS, ["train", "sim", "debug"])
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "Role"}
    assert roles == {("train", "gpufleet-team-vision"), ("debug", "gpufleet-team-vision"), ("train", "gpufleet-team-speech")}
    binding = next(o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == "debug")
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gpufleet:vision"}]
    role = next(o for o in objs if o["kind"] == "Role")
    queue_rules = [r for r in role["rules"] if "localqueues" in r["resources"]]
    assert queue_rules and all(set(r["verbs"]) <= {"get", "list", "watch"} for r in queue_rules)
    policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    assert [v["expression"] for v in policy["spec"]["validations"]]  # evaluated in the test below
    labelled = {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"}
    assert labelled == {"train", "sim", "debug"}


def _admits(policy: dict, obj: dict, namespace: str) -> bool:
    """Every validation of the policy evaluated with cel-python as the API server would (object, namespaceObject)."""
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(obj),
                  "namespaceObject": celpy.json_to_cel({"metadata": {"name": namespace}})}
    results = [env.program(env.compile(v["expression"])).evaluate(activation) for v in policy["spec"]["validations"]]
    assert all(isinstance(r, celpy.celtypes.BoolType) for r in results), results  # no CEL error value
    return all(bool(r) for r in results)


def _job(namespace: str, labels: dict | None, kind: str = "Job") -> dict:
    meta: dict = {"name": "train-1", "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "batch/v1" if kind == "Job" else "jobset.x-k8s.io/v1alpha2", "kind": kind, "metadata": meta}


@pytest.mark.parametrize(("namespace", "labels", "kind", "admitted"), [
    ("train", {"kueue.x-k8s.io/queue-name": "train"}, "Job", True),
    ("debug", {"kueue.x-k8s.io/queue-name": "debug", "team": "vision"}, "JobSet", True),
    ("train", None, "Job", False),  # no labels at all
    ("train", {"team": "vision"}, "Job", False),  # no queue label
    ("train", {"kueue.x-k8s.io/queue-name": "debug"}, "Job", False),  # another namespace's queue
    ("train", {"kueue.x-k8s.io/queue-name": ""}, "JobSet", False),
    ("debug", {"kueue.x-k8s.io/queue-name": "train"}, "JobSet", False),
])
def test_the_admission_policy_admits_only_work_submitted_through_its_namespace_queue(
        namespace: str, labels: dict | None, kind: str, admitted: bool) -> None:
    objs = acc.kubernetes_objects(TENANTS, ["train", "sim", "debug"])
    policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    assert _admits(policy, _job(namespace, labels, kind), namespace) is admitted
    binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
    namespace_object = next(o for o in objs if o["kind"] == "Namespace" and o["metadata"]["name"] == namespace)
    assert selector.items() <= namespace_object["metadata"]["labels"].items()  # the policy applies there


def test_slurm_accounts_qos_capped_at_the_partition_quota_and_allow_accounts() -> None:
    cmds = acc.sacctmgr_commands(TENANTS, [acc.PartitionQuota("train", 640), acc.PartitionQuota("sim", 200),
                                           acc.PartitionQuota("debug", 40)], "local")
    text = [shlex.join(c) for c in cmds]
    assert "sacctmgr -i add qos vision-debug GrpTRES=gres/gpu=40 'Description=team vision on partition debug'" in text
    assert any(t.startswith("sacctmgr -i add account speech Cluster=local") and "QOS=speech-train" in t for t in text)
    assert sum(t.startswith("sacctmgr -i add user") for t in text) == 2
    assert acc.allow_accounts(TENANTS, ["train", "sim", "debug"]) == {
        "train": "root,speech,vision", "sim": "root", "debug": "root,vision"}


def test_a_tenant_naming_an_unknown_partition_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="partition 'gpu'"):
        acc.kubernetes_objects((Tenant(name="x", partitions=("gpu",)),), ["train"])
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
    assert json.loads((tmp_path / "a" / "allow-accounts.json").read_text())[parts[0]] == "root,vision"
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
    qos = "\n".join(f"{q.name}|gres/gpu={q.gpus if q.name != 'part-sim' else 8}" for q in want.qos) + "\nnormal|\n"
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
        "train": "normal,speech-train,vision-train", "sim": "normal", "debug": "normal,vision-debug"}
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
    preempt = ["sacctmgr", "-i", "modify", "qos", "where", "name=urgent-debug", "set", "Preempt=bulk-debug"]
    assert cmds.index(add_urgent) < cmds.index(preempt)  # every QOS exists before a Preempt= names it
    assert acc.sacctmgr_commands(teams, quotas, "local") == acc.sacctmgr_commands(teams, quotas, "local", False)
    assert not any("Preempt=" in " ".join(c) or "Priority=" in " ".join(c)
                   for c in acc.sacctmgr_commands(teams, quotas, "local"))
    # read back as `sacctmgr -n -P show qos format=name,grptres,priority,preempt` prints it
    want = acc.slurm_access(teams, quotas, "local", preemption=True)
    qos = "\n".join(f"{q.name}|{'' if q.gpus is None else f'gres/gpu={q.gpus}'}|{q.priority}|{','.join(q.preempt)}"
                    for q in want.qos)
    assocs = "\n".join(f"{a.name}||{','.join(a.qos)}|{a.default_qos}" for a in want.accounts)
    assert acc.access_changes(want, parse_existing("local\n", qos, assocs)) == []
    edited = qos.replace("urgent-debug|gres/gpu=10|10|bulk-debug", "urgent-debug|gres/gpu=10|3|").replace(
        "part-train||0|", "part-train|gres/gpu=640|0|")
    assert acc.access_changes(want, parse_existing("local\n", edited, assocs)) == [
        ["sacctmgr", "-i", "modify", "qos", "where", "name=part-train", "set", "GrpTRES=gres/gpu=-1"],
        ["sacctmgr", "-i", "modify", "qos", "where", "name=urgent-debug", "set", "Priority=10"],
        ["sacctmgr", "-i", "modify", "qos", "where", "name=urgent-debug", "set", "Preempt=bulk-debug"]]
