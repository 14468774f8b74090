"""playbooks/storage_clients.yml for real, in check mode on this machine as a storage client: the
extravars the rollout builds (`gpufleet.rollout.wiring.storage_client_vars` from the stack's outputs
and the BOM's Lustre pin) make it report the stack's FSx mount (mount point, fstab line) and fio,
and it writes nothing. The Lustre packages come from AWS's repository on real clients only; here
the role gets an apt source it never reads (check mode skips the install) and no key download."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.project import find_project
from gpufleet.rollout.wiring import storage_client_vars
from gpufleet.spec import load_stack

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MOUNT = "/fsx-gpufleet-check"  # never created: check mode
OUTPUTS = {"fsxDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", "fsxMountName": "abcdwxyz"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the Lustre client role manages root-owned files "
                                                           "(run as root, as CI)")
pytestmark = [pytestmark, pytest.mark.slow]  # real ansible-playbook runs


def test_check_mode_reports_the_stacks_mount_and_fio_and_writes_nothing(tmp_path):
    spec = load_stack("dev")
    spec = spec.model_copy(update={"storage": spec.storage.model_copy(update={"mount_path": MOUNT})})
    extravars = storage_client_vars(spec, find_project(ROOT), OUTPUTS)
    assert extravars["lustre_client_fs_dns"] == OUTPUTS["fsxDnsName"] and extravars["lustre_client_mount_path"] == MOUNT
    assert not [k for k in extravars if not k.startswith(("lustre_client_", "gpufleet_"))]  # nothing of the GPU roles
    extravars |= {"gpufleet_become": False, "gpufleet_live_system": False, "lustre_client_repo_key_url": "",
                  "lustre_client_apt_source": "deb [trusted=yes] file:///nonexistent ./",
                  "ansible_python_interpreter": sys.executable}
    (tmp_path / "inventory").write_text("[storage]\nlocalhost ansible_connection=local\n")
    fstab = Path("/etc/fstab").read_bytes() if Path("/etc/fstab").exists() else None
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "playbooks" / "roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inventory"),
                           str(ROOT / "playbooks" / "storage_clients.yml"), "--check", "--diff",
                           "-e", json.dumps(extravars)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert f"{OUTPUTS['fsxDnsName']}@tcp:/{OUTPUTS['fsxMountName']} {MOUNT} lustre" in out  # the pending fstab line
    assert "TASK [Install fio]" in out and "failed=0" in out
    assert not Path(MOUNT).exists()
    assert (Path("/etc/fstab").read_bytes() if Path("/etc/fstab").exists() else None) == fstab
    assert not Path("/etc/apt/sources.list.d/gpufleet-fsx-lustre.list").exists()
