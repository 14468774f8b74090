"""The software layer's real adapter: one ansible-runner `--check --diff` run of site.yml brings back
both the tasks a converge would change and each host's `gpufleet` fact (playbooks/roles/node_facts),
read from the run's own job events. ansible-runner runs for real, on this machine through the
chroot connection into `/`, with a two-part site.yml: the real node_facts role and one task whose
file differs from what it would write.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from gpufleet.configure.executor import AnsibleExecutor
from gpufleet.configure.inventory import ChrootConnection
from gpufleet.configure.runner import AnsibleConfigurator
from gpufleet.reports.drift_software import CHECK_MODE, CheckModeHost, check_mode_findings
from gpufleet.reports.sources import AnsibleSoftware, facts_from_events
from gpufleet.ports import Instance

REPO = Path(__file__).resolve().parents[2]
SITE = """
- name: Converge (drift test)
  hosts: gpu
  gather_facts: false
  roles:
    - role: node_facts
  tasks:
    - name: Pin the NCCL environment file
      ansible.builtin.copy:
        dest: "{{ drift_test_file }}"
        content: "NCCL_PROTO=simple\\n"
        mode: "0644"
"""


@pytest.mark.slow  # real ansible-playbook in check mode, ~9 s
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root")
def test_check_mode_reports_changed_tasks_and_the_fact_without_changing_anything(tmp_path):
    playbooks = tmp_path / "playbooks"
    (playbooks / "roles").mkdir(parents=True)
    (playbooks / "site.yml").write_text(SITE)
    os.symlink(REPO / "playbooks" / "roles" / "node_facts", playbooks / "roles" / "node_facts")
    facts_dir = tmp_path / "facts.d"
    facts_dir.mkdir()
    shutil.copy(REPO / "playbooks" / "roles" / "node_facts" / "files" / "gpufleet.fact", facts_dir / "gpufleet.fact")
    (facts_dir / "gpufleet.fact").chmod(0o755)
    edited = tmp_path / "nccl.conf"
    edited.write_text("NCCL_PROTO=LL128\n")  # edited by hand on the node

    runner = AnsibleConfigurator(tmp_path / "state", playbook_dir=playbooks)
    executor = AnsibleExecutor(runner, ChrootConnection(python=sys.executable),
                               {"node_facts_dir": str(facts_dir), "drift_test_file": str(edited)})
    here = Instance(slot="node-a", instance_id="i-0a", batch=1, block=0, private_ip="/")
    lost = Instance(slot="node-b", instance_id="i-0b", batch=1, block=0, private_ip=None)
    facts, hosts = AnsibleSoftware(lambda: executor).collect([here, lost])

    assert hosts["node-a"] == CheckModeHost("node-a", "ok", ("Pin the NCCL environment file",), None)
    assert edited.read_text() == "NCCL_PROTO=LL128\n"  # check mode changed nothing
    versions = facts["node-a"].versions
    assert versions is not None and versions["kernel"] == os.uname().release
    assert set(versions) >= {"nccl", "nvidia_driver", "efa_installer", "slurm"}
    assert facts["node-b"].versions is None and "no private IP" in facts["node-b"].error
    assert hosts["node-b"].status == "unreachable"
    # every finding names its host; the unreachable one is a finding, never skipped
    found = check_mode_findings(hosts, ["node-a", "node-b"])
    assert [(f.check, f.subject, f.field) for f in found] == [
        (CHECK_MODE, "node-a", "Pin the NCCL environment file"), (CHECK_MODE, "node-b", "host")]


def test_facts_come_only_from_the_node_facts_setup_result():
    events = [
        {"event": "runner_on_ok", "event_data": {"host": "a", "task": "Read the gpufleet fact", "res": {
            "ansible_facts": {"ansible_local": {"gpufleet": {"versions": {"nccl": "2.27.5"}, "inventory": {}}}}}}},
        {"event": "runner_on_ok", "event_data": {"host": "b", "task": "Read the gpufleet fact", "res": {
            "ansible_facts": {"ansible_local": {}}}}},  # the fact file is not installed
        {"event": "runner_on_failed", "event_data": {"host": "c", "res": {"msg": "boom"}}},
        {"event": "runner_on_ok", "event_data": {"host": "d", "res": {
            "ansible_facts": {"ansible_local": {"gpufleet": "not json"}}}}},
    ]
    assert facts_from_events(events) == {"a": {"nccl": "2.27.5"}}
