"""Per-host verdicts over real SSH: hosts are network namespaces on our own bridge, each with
its own sshd (local-components.md section 3). One host fails a task, one address is dead, one
host goes dark mid-play (its veth is cut while a task runs there); the others must finish,
and the whole play must end in seconds thanks to the SSH keep-alives.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from configure_host import ensure_system_packages, require_root
from infra.configure.inventory import Node, SshConnection
from infra.configure.runner import AnsibleConfigurator, Verdict

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

BRIDGE = "gfcfg-br"
NET = "10.213.77"
LIVE = {"n1": 11, "n2": 12, "n3": 13}
DEAD = ("n4", 14)  # an address on the bridge with nobody behind it

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


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture
def netns_hosts(tmp_path: Path):
    require_root("network namespaces with sshd")
    ensure_system_packages("openssh-server", "openssh-client", "iproute2")
    key = tmp_path / "id_ed25519"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    (tmp_path / "authorized_keys").write_text((tmp_path / "id_ed25519.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    pids = []
    try:
        for name, last in LIVE.items():
            ns, veth = f"gfcfg-{name}", f"gfcfg-v{name}"
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", veth, "master", BRIDGE, "up")
            sh("ip", "-n", ns, "addr", "add", f"{NET}.{last}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / f"hostkey-{name}"))
            cfg = tmp_path / f"sshd_config-{name}"
            pidfile = tmp_path / f"sshd-{name}.pid"
            cfg.write_text(f"ListenAddress {NET}.{last}\nHostKey {tmp_path}/hostkey-{name}\nPidFile {pidfile}\n"
                           f"PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                           f"AuthorizedKeysFile {tmp_path}/authorized_keys\nStrictModes no\nUsePAM no\n")
            sh("ip", "netns", "exec", ns, "/usr/sbin/sshd", "-f", str(cfg))
            pids.append(pidfile)
        yield key
    finally:
        for pidfile in pids:
            if pidfile.exists():
                subprocess.run(["kill", pidfile.read_text().strip()], capture_output=True)
        for name in LIVE:
            subprocess.run(["ip", "link", "del", f"gfcfg-v{name}"], capture_output=True)
            subprocess.run(["ip", "netns", "del", f"gfcfg-{name}"], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def test_failed_dead_and_dark_hosts_get_their_verdicts_quickly(netns_hosts, tmp_path):
    playbooks = tmp_path / "playbooks"
    (playbooks / "roles").mkdir(parents=True)
    (playbooks / "probe.yml").write_text(PLAY)
    nodes = [Node(slot=n, address=f"{NET}.{last}", hostvars={"ansible_python_interpreter": "/usr/bin/python3"})
             for n, last in (*LIVE.items(), DEAD)]
    conn = SshConnection(user="root", private_key_file=netns_hosts, connect_timeout_s=3)
    cut = []

    def on_progress(p):
        if p.task == "Work that fails on one host" and p.host == "n3" and not cut:
            # n3 is about to run the long task: take its link away shortly after it starts
            cut.append(subprocess.Popen(["sh", "-c", "sleep 1.5; ip link set gfcfg-vn3 down"]))

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
