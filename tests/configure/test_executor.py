"""The Executor port over ansible-runner, for real: SSH into network-namespace hosts whose sshd
chroots each session into the host's own overlay of the Debian base, with stub GPU tools there.

preflight.yml brings bundles back to dest/<slot>/ (a host cut mid-run and a dead address end
unreachable with no bundle, stale bundles never survive); configure runs site.yml with the
stack's vars and names the failing task; remediate.yml resets idle GPUs, refuses busy ones and
reboots (the boot id changes). Unit tests at the end need neither root nor SSH.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from configure_host import PROJECT_ROOT, ensure_system_packages, require_root
from netns_lab import NetnsLab
from node_stubs import dispatch, install_outputs, install_tool
from gpufleet.configure.executor import AnsibleExecutor, stack_executor
from gpufleet.configure.inventory import SshConnection, SsmConnection
from gpufleet.configure.runner import AnsibleConfigurator
from gpufleet.errors import ConfigError
from gpufleet.gates import synth
from gpufleet.project import find_project
from gpufleet.ports import HostStatus, Instance
from gpufleet.spec import load_stack

PLAYBOOKS = PROJECT_ROOT / "playbooks"
HOSTS = ("n1", "n2", "n3")
BOOT_ID = "var/lib/stub-boot-id"  # inside each host's root, shown as /proc/sys/kernel/random/boot_id


@pytest.fixture(scope="module")
def lab(base_rootfs, tmp_path_factory):
    require_root("network namespaces with sshd")
    ensure_system_packages("openssh-server", "openssh-client", "iproute2")
    with NetnsLab(tmp_path_factory.mktemp("executor-lab")) as lab:
        for name in HOSTS:
            root = lab.overlay_root(name, [base_rootfs])
            node = synth.NodeSpec(slot=name)
            install_outputs(root, {"query-gpu.csv": synth.query_gpu_csv(node), "apps-idle.csv": "",
                                   "apps-busy.csv": "4711, /usr/bin/python3\n"})
            # the host's boot id, a file the reboot stub can change (mounted before sshd starts: its
            # namespace sees only the mounts made before it)
            (root / BOOT_ID).write_text("6d2c3f7e-0000-4000-8000-000000000001\n")
            lab.mount("--bind", str(root / BOOT_ID), str(root / "proc/sys/kernel/random/boot_id"))
            lab.add_host(name, root=root)
        yield lab


def instances(lab: NetnsLab, *names: str, dead: str | None = None) -> list[Instance]:
    out = [Instance(slot=n, instance_id=f"i-{i:017x}", batch=1, block=0, private_ip=lab.hosts[n].address)
           for i, n in enumerate(names)]
    if dead:
        out.append(Instance(slot=dead, instance_id="i-0dead", batch=1, block=0, private_ip=lab.dead_address()))
    return out


def executor(lab: NetnsLab, tmp_path: Path, collections_dir: Path, playbook_dir: Path = PLAYBOOKS,
             site_vars: dict | None = None) -> AnsibleExecutor:
    runner = AnsibleConfigurator(tmp_path / "state", playbook_dir=playbook_dir, collections=collections_dir, forks=10)
    conn = SshConnection(user="root", private_key_file=lab.key, connect_timeout_s=3)
    return AnsibleExecutor(runner, conn, site_vars or {}, groups=("slurm",),
                           context={"gpufleet_stack": "rehearsal", "gpufleet_instance_type": "p5.48xlarge",
                                    "ansible_python_interpreter": "/usr/bin/python3"})


@pytest.mark.requires_root
@pytest.mark.slow
def test_preflight_bundles_come_home_and_cut_or_dead_hosts_are_unreachable(lab, tmp_path, collections_dir):
    for name in HOSTS:
        root = lab.hosts[name].root
        install_tool(root, "/usr/local/bin/nvidia-smi", dispatch({"--query-gpu=*": "query-gpu.csv"}))
        # dcgmi diag takes its time everywhere; n3 is cut while it runs
        install_tool(root, "/usr/local/bin/dcgmi", 'sleep 2; echo \'{"DCGM GPU Diagnostic": {}}\'')
    dest = tmp_path / "bundles"
    (dest / "n3").mkdir(parents=True)
    (dest / "n3" / "manifest.json").write_text('{"stale": true}')  # an earlier attempt's bundle
    (dest / "n1").mkdir()
    (dest / "n1" / "old-only.txt").write_text("from an earlier attempt")
    ex = executor(lab, tmp_path, collections_dir)
    cut_timer: list[threading.Timer] = []

    def on_instance_id_read(_):
        if not cut_timer:  # n3 now enters the gate commands: cut it while dcgmi runs there
            cut_timer.append(threading.Timer(1.0, lab.cut, ("n3",)))
            cut_timer[0].start()

    original = ex.runner.run

    def run_and_watch(*args, **kwargs):
        progress = kwargs["on_progress"]

        def both(p):
            progress(p)
            if p.host == "n3" and p.task.startswith("Read the instance id"):
                on_instance_id_read(p)
        return original(*args, **{**kwargs, "on_progress": both})

    ex.runner.run = run_and_watch
    started = time.monotonic()
    result = ex.preflight(instances(lab, *HOSTS, dead="n4"), dest)
    elapsed = time.monotonic() - started
    assert cut_timer, "n3 was never cut"
    hosts = result.hosts
    assert [hosts[n].status for n in ("n1", "n2")] == [HostStatus.OK, HostStatus.OK], hosts
    assert hosts["n3"].status is HostStatus.UNREACHABLE, hosts["n3"]
    assert hosts["n4"].status is HostStatus.UNREACHABLE and hosts["n4"].task, hosts["n4"]
    for name in ("n1", "n2"):
        manifest = json.loads((dest / name / "manifest.json").read_text())
        assert manifest["slot"] == name and manifest["stack"] == "rehearsal" and manifest["batch"] == 1
        assert (dest / name / "nvidia-smi-query-gpu.csv").read_text() == synth.query_gpu_csv(synth.NodeSpec(name))
    assert not (dest / "n1" / "old-only.txt").exists(), "a stale file survived the new bundle"
    assert not (dest / "n3").exists() and not (dest / "n4").exists()
    assert sorted(p.name for p in dest.iterdir()) == ["n1", "n2"], "the staging folder must be gone"
    assert 0 < hosts["n3"].duration_s < hosts["n1"].duration_s <= result.duration_s < elapsed + 0.01
    # ansible-core keeps looping over a loop's remaining items after an unreachable one, each item
    # costing one connect timeout (3 s here): the cut host ends within its loop's items x 3 s
    loop_items = len(yaml.safe_load((PLAYBOOKS / "preflight.yml").read_text())[0]["vars"]["gpufleet_commands"])
    assert hosts["n3"].duration_s < 15 + loop_items * 3 * 1.5, hosts["n3"]


SITE_PROBE = """
- name: Stand-in for site.yml
  hosts: gpu
  gather_facts: false
  tasks:
    - name: Write the pinned driver version
      ansible.builtin.copy:
        dest: /etc/gpufleet-driver
        content: "{{ nvidia_driver_version }} {{ group_names | sort | join(',') }}"
        mode: "0644"
    - name: Fail where the node is marked broken
      ansible.builtin.command: test ! -e /etc/broken
      changed_when: false
"""


@pytest.mark.requires_root
@pytest.mark.slow
def test_configure_passes_the_site_vars_and_names_the_failing_task(lab, tmp_path, collections_dir):
    playbooks = tmp_path / "playbooks"
    (playbooks / "roles").mkdir(parents=True)
    (playbooks / "site.yml").write_text(SITE_PROBE)
    (lab.hosts["n2"].root / "etc/broken").write_text("")
    try:
        ex = executor(lab, tmp_path, collections_dir, playbooks, {"nvidia_driver_version": "570.172.08"})
        result = ex.configure(instances(lab, "n1", "n2"))
    finally:
        (lab.hosts["n2"].root / "etc/broken").unlink()
    assert result.ok() == ["n1"]
    assert (lab.hosts["n1"].root / "etc/gpufleet-driver").read_text() == "570.172.08 gpu,slurm"
    failed = result.hosts["n2"]
    assert failed.status is HostStatus.FAILED and failed.task == "Fail where the node is marked broken", failed
    assert "non-zero return code" in (failed.message or "")


@pytest.mark.requires_root
@pytest.mark.slow
def test_remediate_resets_idle_gpus_and_refuses_busy_ones(lab, tmp_path, collections_dir):
    for name, apps in (("n1", "apps-idle.csv"), ("n2", "apps-busy.csv")):
        install_tool(lab.hosts[name].root, "/usr/local/bin/nvidia-smi", dispatch({
            "--query-compute-apps=*": apps,
            "-r": "!echo reset >> /var/log/gpu-resets; echo 'All done.'"}))
    ex = executor(lab, tmp_path, collections_dir)
    idle = ex.remediate(instances(lab, "n1")[0], "reset-gpu")
    busy = ex.remediate(instances(lab, "n2")[0], "reset-gpu")
    assert idle.status is HostStatus.OK and idle.duration_s > 0, idle
    assert (lab.hosts["n1"].root / "var/log/gpu-resets").read_text() == "reset\n"
    assert busy.status is HostStatus.FAILED and busy.task == "Refuse to reset GPUs that are in use", busy
    assert "4711" in (busy.message or "")
    assert not (lab.hosts["n2"].root / "var/log/gpu-resets").exists()


@pytest.mark.requires_root
@pytest.mark.slow
def test_remediate_reboot_waits_for_a_new_boot(lab, tmp_path, collections_dir):
    root = lab.hosts["n3"].root
    subprocess.run(["ip", "link", "set", lab.hosts["n3"].veth, "up"], check=True)  # the preflight test cut it
    # the "reboot": a new boot id, as a real one gives
    install_tool(root, "/usr/sbin/shutdown",
                 f"echo \"$*\" >> /var/log/shutdowns; echo 6d2c3f7e-0000-4000-8000-000000000002 > /{BOOT_ID}")
    ex = executor(lab, tmp_path, collections_dir)
    ex.context["gpufleet_remediate_reboot_timeout_s"] = 60
    outcome = ex.remediate(instances(lab, "n3")[0], "reboot")
    assert outcome.status is HostStatus.OK, outcome
    assert (root / BOOT_ID).read_text().endswith("0002\n")
    assert "-r" in (root / "var/log/shutdowns").read_text()


# --- no root, no SSH ---------------------------------------------------------------------------

class _NeverRun:
    def __call__(self, **kwargs):
        raise AssertionError("the runner must not start when no host can be reached")


def test_instances_without_an_address_are_unreachable_without_a_run(tmp_path):
    runner = AnsibleConfigurator(tmp_path, playbook_dir=tmp_path, collections=tmp_path, backend=_NeverRun())
    ssh = AnsibleExecutor(runner, SshConnection(), {})
    out = ssh.configure([Instance(slot="b1-n000", instance_id="i-1", batch=1, block=0, private_ip=None)])
    assert out.hosts["b1-n000"].status is HostStatus.UNREACHABLE
    assert "no private IP" in out.hosts["b1-n000"].message
    ssm = AnsibleExecutor(runner, SsmConnection(bucket="b", region="us-east-1"), {})
    out = ssm.preflight([Instance(slot="b1-n001", instance_id="", batch=1, block=0, private_ip="10.0.0.9")],
                        tmp_path / "dest")
    assert out.hosts["b1-n001"].status is HostStatus.UNREACHABLE and "instance id" in out.hosts["b1-n001"].message
    assert list((tmp_path / "dest").iterdir()) == []


def test_unknown_remediation_is_refused(tmp_path):
    runner = AnsibleConfigurator(tmp_path, playbook_dir=tmp_path, collections=tmp_path, backend=_NeverRun())
    with pytest.raises(ConfigError, match="unknown remediation"):
        AnsibleExecutor(runner, SshConnection(), {}).remediate(
            Instance(slot="s", instance_id="i", batch=1, block=0, private_ip="10.0.0.1"), "power-cycle")


def test_stack_executor_takes_the_stacks_bom_pool_and_gate_settings(tmp_path):
    project = find_project(PROJECT_ROOT)
    spec = load_stack("dev", project.stacks_dir)
    ex = stack_executor(spec, project, "dev", SshConnection(user="ubuntu"))
    assert ex.site_vars["nvidia_driver_version"] and ex.site_vars["gpufleet_bom_digest"]
    assert ex.context == {"gpufleet_stack": "dev", "gpufleet_instance_type": spec.cluster.instance_type}
    assert ex.preflight_vars["gpufleet_dcgm_level"] == spec.gates.dcgm_level
    assert ex.groups == ((spec.pool.type,) if spec.pool.type in ("slurm", "kubernetes") else ())
    assert ex.runner.state_dir == project.state_dir("dev") and ex.runner.playbook_dir == project.playbooks_dir
    root = stack_executor(spec, project, "dev", SshConnection(user="root"))
    assert root.context["gpufleet_become"] is False
