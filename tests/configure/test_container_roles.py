"""Roles enroot and pyxis for real (ansible-playbook on localhost as a Slurm node, everything under
a temporary folder): a --check --diff run reports the pending enroot install and pyxis build at
the BOM's pins and writes nothing; with the plugin built (its release recorded) a run registers
it in Slurm's plugin stack, keeps the lines already there, points enroot's per-user paths where a
job step can create them, and a second run changes nothing; image_prepull on a Slurm node
imports the pinned digest with enroot (a stand-in CLI) under the URI enroot parses, once. The
downloads and the build need the network and Slurm's headers: they run on real nodes only, as
the efa role's installer does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.bom import load_bom

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IMAGE = "public.ecr.aws/hpc-cloud/pytorch@sha256:" + "ab" * 32

PLAY = """---
- name: A Slurm node
  hosts: slurm
  gather_facts: {facts}
  roles: {roles}
  tasks:
    - name: Configure enroot for jobs (no install)
      ansible.builtin.include_role: {{name: enroot, tasks_from: configure}}
      when: configure_enroot | default(false)
    - name: Show the image runtime image_prepull picks here
      ansible.builtin.debug:
        msg: "runtime={{{{ image_prepull_runtime | default('') }}}}"
"""


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the roles write root-owned files (run as root, as CI)")
pytestmark = [pytestmark, pytest.mark.slow]  # real ansible-playbook runs, 30-50 s each


def _run(tmp_path: Path, roles: list[str], *extra: str, **more: object) -> subprocess.CompletedProcess:
    (tmp_path / "inventory").write_text("[slurm]\nlocalhost ansible_connection=local\n")
    (tmp_path / "play.yml").write_text(PLAY.format(roles=json.dumps(roles), facts=json.dumps("enroot" in roles)))
    pins = load_bom().slurm_containers
    assert pins is not None
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROOT / "playbooks/roles"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
               PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")  # stand-in tools, when a test has some
    extravars = {"enroot_version": pins.enroot, "pyxis_version": pins.pyxis, "slurm_version": "24.11.6",
                 "enroot_workdir": str(tmp_path / "enroot-work"), "pyxis_workdir": str(tmp_path / "pyxis-work"),
                 "pyxis_prefix": str(tmp_path / "usr/local"), "pyxis_slurm_conf_dir": str(tmp_path / "etc/slurm"),
                 "enroot_sysconf_dir": str(tmp_path / "etc/enroot"), "enroot_tmpfiles_dir": str(tmp_path / "etc/tmpfiles.d"),
                 "enroot_run_dir": str(tmp_path / "run/enroot"), "image_prepull_image": IMAGE,
                 "gpufleet_live_system": False, "ansible_python_interpreter": sys.executable, **more}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inventory"), str(tmp_path / "play.yml"),
                           "-e", json.dumps(extravars), *extra], env=env, capture_output=True, text=True, timeout=300)


# the head of enroot 3.x's packaged /etc/enroot/enroot.conf (conf/enroot.conf.in, NVIDIA/enroot)
ENROOT_CONF = """#ENROOT_LIBRARY_PATH        /usr/lib/enroot
#ENROOT_SYSCONF_PATH        /etc/enroot
#ENROOT_RUNTIME_PATH        ${XDG_RUNTIME_DIR}/enroot
#ENROOT_CONFIG_PATH         ${XDG_CONFIG_HOME}/enroot
"""


def _changed(proc: subprocess.CompletedProcess) -> int:
    recap = [line for line in proc.stdout.splitlines() if line.startswith("localhost")][-1]
    return int(recap.split("changed=")[1].split()[0])


def _enroot_at_pin() -> bool:
    """Whether this machine already holds enroot at the pin (then the role has nothing to report)."""
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "enroot"], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.startswith(load_bom().slurm_containers.enroot + "-")


def test_check_mode_reports_the_pinned_installs_and_writes_nothing(tmp_path):
    proc = _run(tmp_path, ["enroot", "image_prepull", "pyxis"], "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-4000:]
    pins = load_bom().slurm_containers
    if not _enroot_at_pin():
        assert f"enroot -> {pins.enroot} (enroot_{pins.enroot}-1_" in proc.stdout
    assert f"pyxis -> {pins.pyxis}, built against Slurm 24.11.6" in proc.stdout
    assert "runtime=enroot" in proc.stdout  # image_prepull's default on a Slurm node
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ansible-tmp", "inventory", "play.yml"]  # nothing written


def test_a_built_plugin_is_registered_in_the_plugin_stack_once(tmp_path):
    pins = load_bom().slurm_containers
    (tmp_path / "usr/local/share/pyxis").mkdir(parents=True)
    (tmp_path / "usr/local/share/pyxis/gpufleet-version").write_text(pins.pyxis + "\n")
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/plugstack.conf").write_text("optional /usr/lib/slurm/other_spank.so\n")
    (tmp_path / "etc/enroot").mkdir(parents=True)
    (tmp_path / "etc/tmpfiles.d").mkdir()  # systemd's; always there on a node
    (tmp_path / "etc/enroot/enroot.conf").write_text(ENROOT_CONF)
    first = _run(tmp_path, ["pyxis"], configure_enroot=True)
    assert first.returncode == 0, first.stdout[-4000:]
    assert (tmp_path / "etc/slurm/plugstack.conf.d/pyxis.conf").read_text() == (
        f"required {tmp_path}/usr/local/lib/slurm/spank_pyxis.so\n")
    assert (tmp_path / "etc/slurm/plugstack.conf").read_text() == (
        f"optional /usr/lib/slurm/other_spank.so\ninclude {tmp_path}/etc/slurm/plugstack.conf.d/*.conf\n")
    assert not (tmp_path / "pyxis-work").exists()  # built already: nothing downloaded or built
    conf = (tmp_path / "etc/enroot/enroot.conf").read_text()
    assert conf == ENROOT_CONF.replace("#ENROOT_RUNTIME_PATH        ${XDG_RUNTIME_DIR}/enroot",
                                       f"ENROOT_RUNTIME_PATH {tmp_path}/run/enroot/user-$(id -u)") + (
        "ENROOT_DATA_PATH /tmp/enroot-data/user-$(id -u)\nENROOT_CACHE_PATH /tmp/enroot-cache/group-$(id -g)\n")
    assert (tmp_path / "etc/tmpfiles.d/gpufleet-enroot.conf").read_text().endswith(
        f"d {tmp_path}/run/enroot 1777 root root -\n")
    assert oct((tmp_path / "run/enroot").stat().st_mode & 0o7777) == "0o1777"
    second = _run(tmp_path, ["pyxis"], configure_enroot=True)
    assert second.returncode == 0 and _changed(second) == 0, second.stdout[-4000:]


FAKE_ENROOT = """#!/bin/sh
# a stand-in for enroot's CLI: `import -o FILE URI` writes FILE; every call is logged
echo "$*" >> "{log}"
[ "$1" = import ] && [ "$2" = -o ] && echo squashfs > "$3"
exit 0
"""


def test_image_prepull_on_a_slurm_node_imports_the_pinned_digest_with_enroot_once(tmp_path):
    # enroot's URI: the registry before '#', the digest where the tag goes (a '/' would mean Docker Hub)
    image, uri = IMAGE, "docker://public.ecr.aws#hpc-cloud/pytorch:sha256:" + "ab" * 32
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/enroot").write_text(FAKE_ENROOT.format(log=tmp_path / "enroot.log"))
    (tmp_path / "bin/enroot").chmod(0o755)
    for _ in range(2):  # the second run finds the squashfs file and imports nothing
        proc = _run(tmp_path, ["image_prepull"], image_prepull_image=image,
                    image_prepull_enroot_dir=str(tmp_path / "enroot"))
        assert proc.returncode == 0, proc.stdout[-4000:]
    digest = image.split("@")[1]
    assert (tmp_path / "enroot.log").read_text() == f"import -o {tmp_path}/enroot/{digest}.sqsh {uri}\n"
    assert "runtime=enroot" in proc.stdout and _changed(proc) == 0
