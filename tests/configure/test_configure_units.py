"""Inventory, extravars, the runner's event mapping, collections cache, the image build argv.

The runner is driven here through a fake backend replaying ansible-runner events; the real
ansible-runner runs in test_roles_chroot.py and test_runner_hosts.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpufleet import catalog
from gpufleet.bom import load_bom
from gpufleet.configure import collections as colls
from gpufleet.configure.extravars import check_no_secrets, configure_extravars
from gpufleet.configure.image import packer_invocation, packer_template, write_image_extravars
from gpufleet.configure.inventory import ChrootConnection, Node, SshConnection, SsmConnection, build_inventory
from gpufleet.configure.runner import AnsibleConfigurator, Verdict
from gpufleet.errors import ConfigError, ExternalCommandFailed
from gpufleet.project import find_project
from gpufleet.spec import load_stack

NODES = [Node("b0-n000", "10.0.0.10", "i-0aaa", groups=("slurm",)), Node("b0-n001", "10.0.0.11", "i-0bbb")]


def test_ssh_inventory_groups_and_keepalives(tmp_path):
    inv = build_inventory(NODES, SshConnection(user="ubuntu", private_key_file=Path("/k")))
    hosts = inv["all"]["hosts"]
    assert hosts["b0-n000"] == {"ansible_host": "10.0.0.10", "ansible_user": "ubuntu", "ansible_port": 22,
                                "ansible_ssh_private_key_file": "/k"}
    assert set(inv["all"]["children"]["gpu"]["hosts"]) == {"b0-n000", "b0-n001"}
    assert set(inv["all"]["children"]["slurm"]["hosts"]) == {"b0-n000"}
    args = SshConnection().ssh_args(tmp_path / "kh")
    for opt in ("ServerAliveInterval=2", "ServerAliveCountMax=2", "ConnectTimeout=10", "BatchMode=yes"):
        assert f"-o {opt}" in args


def test_ssm_inventory_uses_instance_ids_and_needs_them():
    inv = build_inventory(NODES, SsmConnection(bucket="b", region="us-east-1"))
    assert inv["all"]["hosts"]["b0-n001"]["ansible_connection"] == "amazon.aws.aws_ssm"
    assert inv["all"]["hosts"]["b0-n001"]["ansible_host"] == "i-0bbb"
    with pytest.raises(ConfigError, match="instance_id"):
        build_inventory([Node("x", "10.0.0.1")], SsmConnection(bucket="b", region="us-east-1"))


@pytest.mark.parametrize("slots", [["a/b"], ["dup", "dup"]])
def test_bad_or_duplicate_slots_are_rejected(slots):
    with pytest.raises(ConfigError):
        build_inventory([Node(s, "/r") for s in slots], ChrootConnection())


def test_node_from_mapping_keeps_only_ansible_hostvars():
    n = Node.from_mapping({"slot": "s1", "address": "10.0.0.1", "az": "x", "ansible_port": 2222})
    assert n.hostvars == {"ansible_port": 2222}


def test_extravars_follow_bom_and_catalog():
    bom = load_bom()
    ev = configure_extravars(bom, "ubuntu-24.04", catalog.get("p5.48xlarge"))
    assert ev["nvidia_driver_version"] == bom.components.nvidia_driver.version
    assert ev["nvidia_driver_fabric_manager"] is True
    assert ev["nccl_tuning_job_env"] == {"NCCL_SOCKET_IFNAME": "^lo,docker,veth", "NCCL_NET": "Libfabric",
                                         "NCCL_NET_PLUGIN": "ofi"}
    assert ev["gpufleet_bom_digest"] == bom.digest()
    assert "munge_key_secret_id" not in ev
    al = configure_extravars(bom, "al2023", catalog.get("p5.48xlarge"), munge_secret_id="gpufleet/x/munge")
    assert al["container_runtime_write_containerd_config"] is False and al["munge_key_secret_id"]


@pytest.mark.parametrize("extra", [{"munge_key": "abc"}, {"db_password": "x"},
                                   {"ssh": "-----BEGIN OPENSSH PRIVATE KEY-----\nxyz"}])
def test_secret_looking_extravars_are_refused(extra):
    with pytest.raises(ConfigError):
        check_no_secrets({"ok": "1", **extra})


def _event(kind, host, task, **res):
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}


def fake_backend(events, status="failed", rc=2):
    calls = []

    def run(**kwargs):
        calls.append(kwargs)
        for e in events:
            kwargs["event_handler"](e)
        return SimpleNamespace(status=status, rc=rc)

    return run, calls


def test_runner_maps_events_to_verdicts_and_progress(tmp_path):
    events = [
        _event("runner_on_ok", "b0-n000", "Install driver", changed=True),
        _event("runner_on_failed", "b0-n001", "Install driver", msg="non-zero return code", stderr="E: boom"),
        _event("runner_on_unreachable", "b0-n002", "Gathering Facts", msg="Connection timed out"),
    ]
    backend, calls = fake_backend(events)
    progress = []
    nodes = [*NODES, Node("b0-n002", "10.0.0.12"), Node("b0-n003", "10.0.0.13")]
    res = AnsibleConfigurator(tmp_path, backend=backend, collections=tmp_path).run(
        nodes, SshConnection(), {"x": 1}, run_id="r1", on_progress=progress.append)
    h = res.hosts
    assert h["b0-n000"].verdict is Verdict.OK and h["b0-n000"].changed == ("Install driver",)
    assert (h["b0-n001"].verdict, h["b0-n001"].task) == (Verdict.FAILED, "Install driver")
    assert h["b0-n001"].message == "non-zero return code: E: boom"
    assert h["b0-n002"].verdict is Verdict.UNREACHABLE
    assert h["b0-n003"].verdict is Verdict.UNREACHABLE and h["b0-n003"].message == "no task ran on this host"
    assert [p.event for p in progress] == ["changed", "failed", "unreachable"]
    kw = calls[0]
    assert kw["private_data_dir"] == str(tmp_path / "runner" / "r1")
    assert kw["suppress_env_files"] is True and kw["extravars"] == {"x": 1}
    assert "ServerAliveInterval=2" in kw["envvars"]["ANSIBLE_SSH_ARGS"]
    assert kw["envvars"]["PATH"].split(":")[0].endswith("bin")


def test_a_looped_task_reports_the_item_that_failed_not_its_summary(tmp_path):
    """Ansible sums a loop up as "All items completed" even when one item lost the host."""
    cut = _event("runner_on_unreachable", "b0-n000", "Run each gate command", msg="All items completed",
                 unreachable=True, results=[
                     {"item": {"name": "nvidia-smi-q.txt"}, "changed": True, "rc": 0},
                     {"item": {"name": "dcgmi-diag.json"}, "unreachable": True,
                      "msg": "Failed to connect to the host via ssh: Connection timed out"}])
    failed = _event("runner_on_failed", "b0-n001", "Run each gate command", msg="One or more items failed",
                    results=[{"_ansible_item_label": "lspci", "failed": True, "msg": "non-zero return code",
                              "stderr": "lspci: not found"}])
    backend, _ = fake_backend([cut, failed])
    res = AnsibleConfigurator(tmp_path, backend=backend, collections=tmp_path).run(NODES, SshConnection(), {})
    assert res.hosts["b0-n000"].verdict is Verdict.UNREACHABLE
    assert res.hosts["b0-n000"].message == ("item dcgmi-diag.json: Failed to connect to the host via ssh: "
                                            "Connection timed out")
    assert res.hosts["b0-n001"].message == "item lspci: non-zero return code: lspci: not found"


def test_ignored_failures_do_not_fail_a_host(tmp_path):
    ev = _event("runner_on_failed", "b0-n000", "probe", msg="x")
    ev["event_data"]["ignore_errors"] = True
    backend, _ = fake_backend([ev, _event("runner_on_ok", "b0-n000", "next")], status="successful", rc=0)
    res = AnsibleConfigurator(tmp_path, backend=backend, collections=tmp_path).run(NODES[:1], SshConnection(), {})
    assert res.hosts["b0-n000"].verdict is Verdict.OK


def test_a_play_that_never_reached_a_host_is_an_error(tmp_path):
    backend, _ = fake_backend([], status="failed", rc=4)
    with pytest.raises(ExternalCommandFailed, match="no host ran"):
        AnsibleConfigurator(tmp_path, backend=backend, collections=tmp_path).run(NODES, SshConnection(), {})


def test_collections_are_reused_without_download(tmp_path, monkeypatch):
    for name in colls.COLLECTIONS:
        (colls.collections_path(tmp_path) / "ansible_collections" / Path(*name.split("."))).mkdir(parents=True)
    monkeypatch.setattr(colls, "_download_wheel", lambda *a: pytest.fail("downloaded although cached"))
    assert colls.ensure_collections(tmp_path) == colls.collections_path(tmp_path)


def _unq(value):
    return value.strip('"') if isinstance(value, str) else value


def test_packer_invocation_matches_the_template(tmp_path):
    hcl2 = pytest.importorskip("hcl2", reason="python-hcl2 parses the Packer template (test extra)")
    spec = load_stack("dev")
    bom = load_bom()
    argv = packer_invocation(spec, bom, extravars_file=tmp_path / "ev.json")
    template = packer_template(find_project())  # the project's template: this repository's images/
    assert argv[:2] == ["packer", "build"] and argv[-1] == str(template)
    passed = dict(a.split("=", 1) for a in argv[3:-1:2])
    tpl = hcl2.loads(template.read_text())
    declared = {_unq(k): v for block in tpl["variable"] for k, v in block.items()}
    required = {k for k, v in declared.items() if "default" not in v}
    assert required <= set(passed) <= set(declared)
    assert passed["bom_digest"] == bom.digest() and passed["os"] == spec.image.os
    bases = {_unq(k) for k in tpl["locals"][0]["base"]}
    assert bases == {"al2023", "ubuntu-22.04", "ubuntu-24.04"}
    [prov] = tpl["build"][0]["provisioner"]
    ansible = prov['"ansible"']
    playbook = _unq(ansible["playbook_file"]).replace("${path.root}", str(template.parent))
    assert Path(playbook).resolve() == (template.parent.parent / "playbooks" / "site.yml").resolve()
    assert '"@${var.extravars_file}"' in ansible["extra_arguments"]
    ev = json.loads(write_image_extravars(spec, bom, tmp_path / "ev.json").read_text())
    assert ev["gpufleet_live_system"] is False and ev["gpufleet_enable_services"] is True
    assert ev["nvidia_driver_version"] == bom.components.nvidia_driver.version


def test_a_stack_booting_the_eks_nvidia_ami_tells_the_roles_so_another_does_not():
    """Review F9: the roles verify an image that ships the GPU stack instead of layering a second
    driver on it. The stack says which image it boots (its AMI parameter), so the choice reaches the
    roles as an extravar; a pinned AMI id leaves it to the node's own files."""
    from gpufleet.configure.executor import stack_executor
    from gpufleet.configure.extravars import image_ships_gpu_stack
    from gpufleet.configure.inventory import SshConnection
    from gpufleet.project import find_project
    from gpufleet.spec import load_stack

    project = find_project(Path(__file__).resolve().parents[2])
    prod = stack_executor(load_stack("prod", project.stacks_dir), project, "prod", SshConnection(user="ec2-user"))
    assert prod.site_vars["gpufleet_image_ships_gpu_stack"] is True  # prod: al2023, the EKS NVIDIA parameter
    dev = stack_executor(load_stack("dev", project.stacks_dir), project, "dev", SshConnection(user="ubuntu"))
    assert dev.site_vars["gpufleet_image_ships_gpu_stack"] is False  # Ubuntu: the roles install the stack
    assert image_ships_gpu_stack("al2023", "ami-0123456789abcdef0", None) is None  # only the node can tell
    assert image_ships_gpu_stack("al2023", None, "/my/own/al2023-ami") is False
    assert image_ships_gpu_stack(
        "al2023", None, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id")
