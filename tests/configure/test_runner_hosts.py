"""Per-host verdicts over real SSH: hosts are network namespaces on our own bridge, each with
its own sshd (local-components.md section 3). One host fails a task, one address is dead, one
host goes dark mid-play (its veth is cut while a task runs there); the others must finish,
and the whole play must end in seconds thanks to the SSH keep-alives. Names and the subnet are
unique per run (netns_lab.py), so concurrent or crashed runs never collide.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from configure_host import ensure_system_packages, require_root
from netns_lab import NetnsLab, sweep_stale
from gpufleet.configure.inventory import Node, SshConnection
from gpufleet.configure.runner import AnsibleConfigurator, Verdict

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

LIVE = ("n1", "n2", "n3")
DEAD = "n4"  # an address on the bridge with nobody behind it

PLAY = """
- name: Per-host verdict probe
  hosts: gpu
  gather_facts: false
  tasks:
    - name: Reach the host
      ansible.builtin.command: "true"
      changed_when: false
    - name: Work that fails on one host
      ansible.builtin.command: "{{ 'false' if inventory_hostname in probe_fail_hosts else 'true' }}"
      changed_when: false
    - name: Long task during which one host goes dark
      ansible.builtin.command: "sleep {{ 25 if inventory_hostname == 'n3' else 0 }}"
      changed_when: false
    - name: Finish
      ansible.builtin.command: "true"
      changed_when: false
"""


@pytest.fixture
def lab(tmp_path: Path):
    require_root("network namespaces with sshd")
    ensure_system_packages("openssh-server", "openssh-client", "iproute2")
    with NetnsLab(tmp_path / "lab") as lab:
        for name in LIVE:
            lab.add_host(name)
        yield lab


def test_failed_dead_and_dark_hosts_get_their_verdicts_quickly(lab, tmp_path):
    playbooks = tmp_path / "playbooks"
    (playbooks / "roles").mkdir(parents=True)
    (playbooks / "probe.yml").write_text(PLAY)
    addresses = {**{n: h.address for n, h in lab.hosts.items()}, DEAD: lab.dead_address()}
    nodes = [Node(slot=n, address=a, hostvars={"ansible_python_interpreter": "/usr/bin/python3"})
             for n, a in addresses.items()]
    conn = SshConnection(user="root", private_key_file=lab.key, connect_timeout_s=3)
    cut = []

    def on_progress(p):
        if p.task == "Work that fails on one host" and p.host == "n3" and not cut:
            # n3 is about to run the long task: take its link away shortly after it starts
            cut.append(subprocess.Popen(["sh", "-c", f"sleep 1.5; ip link set {lab.hosts['n3'].veth} down"]))

    conf = AnsibleConfigurator(tmp_path / "state", playbook_dir=playbooks, forks=10)
    started = time.monotonic()
    result = conf.run(nodes, conn, {"probe_fail_hosts": ["n2"]}, playbook="probe.yml", on_progress=on_progress)
    elapsed = time.monotonic() - started
    for p in cut:
        p.wait()
    hosts = result.hosts
    assert hosts["n1"].verdict is Verdict.OK, hosts["n1"]
    assert hosts["n2"].verdict is Verdict.FAILED and hosts["n2"].task == "Work that fails on one host", hosts["n2"]
    assert "non-zero return code" in (hosts["n2"].message or "")
    assert hosts["n3"].verdict is Verdict.UNREACHABLE and hosts["n3"].task == "Long task during which one host goes dark", hosts["n3"]
    assert hosts["n4"].verdict is Verdict.UNREACHABLE and hosts["n4"].task == "Reach the host", hosts["n4"]
    assert cut, "the dark host was never cut"
    assert elapsed < 25, f"a dark host must fail fast (keep-alives), took {elapsed:.0f}s"
    # n1 really finished the play: its last task ran
    events = sorted((result.private_data_dir / "artifacts" / "run" / "job_events").glob("*.json"))
    assert any('"Finish"' in e.read_text() and '"n1"' in e.read_text() and "runner_on_ok" in e.read_text()
               for e in events)


def test_two_labs_at_once_do_not_collide_and_a_dead_runs_leftovers_are_swept(tmp_path):
    require_root("network namespaces")
    ensure_system_packages("iproute2", "openssh-server")
    with NetnsLab(tmp_path / "a") as a, NetnsLab(tmp_path / "b") as b:
        assert a.bridge != b.bridge and not a.net.overlaps(b.net)
        ha, hb = a.add_host("n1"), b.add_host("n1")
        assert ha.netns != hb.netns and ha.veth != hb.veth
    # what a crashed run leaves: a record whose pid is gone, with its bridge and namespace still there
    crashed = NetnsLab(tmp_path / "c")
    host = crashed.add_host("n1")
    record = json.loads(crashed._record_path.read_text())
    dead = subprocess.Popen(["true"])
    dead.wait()
    crashed._record_path.write_text(json.dumps({**record, "pid": dead.pid}))
    assert crashed.token in sweep_stale()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert crashed.bridge not in links and host.veth not in links
    assert host.netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not crashed._record_path.exists()
