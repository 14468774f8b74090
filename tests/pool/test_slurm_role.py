"""The `slurm` role applied for real: a controller and a GPU node, each a Debian chroot with a local
repo of dummy packages (the node-configuration tests' helpers), the Secrets Manager calls answered
by a stub that keeps the secret in a file shared by both hosts.

Runs: --check --diff (fails nothing, changes nothing), apply, apply again (changes nothing). Then
the controller filled the empty secret once, both hosts hold the same munge key, the generated
files are installed, slurmd is told its slot, packages are held, and the key is in no artifact.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "configure"))

from gpufleet.configure.inventory import ChrootConnection, Node  # noqa: E402
from gpufleet.configure.runner import AnsibleConfigurator, Verdict  # noqa: E402
from gpufleet.plan import build_plan  # noqa: E402
from gpufleet.pool.slurm.files import write_slurm_config  # noqa: E402
from gpufleet.project import load_project  # noqa: E402

from .conftest import small_spec  # noqa: E402

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VERSION = "24.11.6"
SECRET_ID = "gpufleet/dev/munge"
AWS_STUB = """#!/bin/sh
# Secrets Manager for the slurm role test: the secret's value lives in /srv/secret/value.b64 (a
# folder both chroots bind), empty until put-secret-value.
S=/srv/secret/value.b64
case "$1 $2" in
  "secretsmanager describe-secret")
    if [ -s "$S" ]; then printf 'v1\\tAWSCURRENT\\n'; else echo None; fi ;;
  "secretsmanager get-secret-value")
    [ -s "$S" ] || { echo "ResourceNotFoundException" >&2; exit 254; }; cat "$S"; echo ;;
  "secretsmanager put-secret-value")
    for a in "$@"; do case "$a" in file://*) cp "${a#file://}" "$S" ;; esac; done
    echo '{"VersionId": "v1"}' ;;
  *) echo "stub aws: unsupported: $*" >&2; exit 2 ;;
esac
"""
PLAYBOOK = """---
- name: Configure the Slurm controller
  hosts: slurm_controller
  gather_facts: true
  roles:
    - role: slurm
      vars:
        slurm_role: controller

- name: Configure Slurm nodes
  hosts: slurm
  gather_facts: true
  roles:
    - role: slurm
      vars:
        slurm_role: node
"""


def _snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for rel in ("etc/slurm", "etc/munge", "etc/default/slurmd", "srv/secret"):
        p = root / rel
        for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []):
            if f.is_file():
                out[str(f.relative_to(root))] = f.read_bytes()
    return out


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    import subprocess

    from apt_fixture_repo import Pkg, build_deb, write_packages_index
    from configure_host import Overlay, build_base_rootfs, require_root

    from gpufleet.configure.collections import ensure_collections

    require_root("a debootstrap chroot")
    base = build_base_rootfs()
    tmp = tmp_path_factory.mktemp("slurm-role")
    project_root = tmp / "project"
    project_root.mkdir()
    for name in ("Pulumi.yaml",):
        (project_root / name).write_text((REPO / name).read_text())
    (project_root / "images").symlink_to(REPO / "images")
    (project_root / "stacks").mkdir()
    spec = small_spec()
    files = write_slurm_config(spec.model_copy(update={"pool": spec.pool.model_copy(update={"slurm_version": VERSION})}),
                               build_plan(spec), load_project(project_root), "role", "10.0.16.10")
    secret_dir = tmp / "secret"
    secret_dir.mkdir()
    repo = tmp / "repo"
    repo.mkdir()
    for pkg in (Pkg("slurmctld", f"{VERSION}-1gpufleet1"), Pkg("slurmd", f"{VERSION}-1gpufleet1"),
                Pkg("slurm-client", f"{VERSION}-1gpufleet1"), Pkg("libpmix2", "5.0.1-4"),
                Pkg("munge", "0.5.15-2gpufleet1"), Pkg("slurmd", "23.11.4-1")):  # an older decoy
        build_deb(pkg, repo, tmp)
    write_packages_index(repo)
    overlays = {name: Overlay([base], tmp) for name in ("ctl", "gpu-n1")}
    mounts = []
    try:
        for ov in overlays.values():
            root = ov.root
            for src in (root / "etc/apt/sources.list", root / "etc/apt/sources.list.d/debian.sources"):
                src.unlink(missing_ok=True)
            (root / "srv/repo").mkdir(parents=True)
            subprocess.run(["cp", "-a", f"{repo}/.", str(root / "srv/repo")], check=True)
            (root / "etc/apt/sources.list.d/distro.list").write_text("deb [trusted=yes] file:/srv/repo ./\n")
            subprocess.run(["chroot", str(root), "apt-get", "update", "-q"], check=True, capture_output=True)
            (root / "usr/local/bin/aws").write_text(AWS_STUB)
            (root / "usr/local/bin/aws").chmod(0o755)
            (root / "srv/secret").mkdir(parents=True)
            subprocess.run(["mount", "--bind", str(secret_dir), str(root / "srv/secret")], check=True)
            mounts.append(root / "srv/secret")
        pb = tmp / "playbooks"
        pb.mkdir()
        (pb / "slurm.yml").write_text(PLAYBOOK)
        (pb / "roles").symlink_to(REPO / "playbooks" / "roles")
        conf = AnsibleConfigurator(tmp / "state", playbook_dir=pb, collections=ensure_collections())
        nodes = [Node(slot="ctl", address=str(overlays["ctl"].root), groups=("slurm_controller",)),
                 Node(slot="gpu-n1", address=str(overlays["gpu-n1"].root), groups=("slurm",))]
        ev = {**files, "munge_key_secret_id": SECRET_ID, "munge_key_region": "us-east-1",
              "gpufleet_live_system": False, "gpufleet_enable_services": False}
        before = {n: _snapshot(ov.root) for n, ov in overlays.items()}
        check = conf.run(nodes, ChrootConnection(), ev, playbook="slurm.yml", check=True, run_id="check")
        after_check = {n: _snapshot(ov.root) for n, ov in overlays.items()}
        first = conf.run(nodes, ChrootConnection(), ev, playbook="slurm.yml", run_id="apply")
        second = conf.run(nodes, ChrootConnection(), ev, playbook="slurm.yml", run_id="again")
        yield {"check": check, "first": first, "second": second, "check_touched": before != after_check,
               "roots": {n: ov.root for n, ov in overlays.items()}, "files": files, "secret": secret_dir,
               "state": tmp / "state"}
    finally:
        for m in mounts:
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        for ov in overlays.values():
            ov.close()


def test_check_mode_fails_nothing_and_changes_nothing(applied):
    for host, r in applied["check"].hosts.items():
        assert r.verdict is Verdict.OK, r
    assert not applied["check_touched"]


def test_apply_then_again_changes_nothing(applied):
    for host in ("ctl", "gpu-n1"):
        assert applied["first"].hosts[host].verdict is Verdict.OK, applied["first"].hosts[host]
        assert applied["first"].hosts[host].changed, host
        r = applied["second"].hosts[host]
        assert r.verdict is Verdict.OK and r.changed == (), f"{host} not idempotent: {r.changed}"


def test_both_hosts_share_the_key_the_controller_put_once(applied):
    value = (applied["secret"] / "value.b64").read_text().strip()
    key = base64.b64decode(value)
    assert len(key) == 1024
    for root in applied["roots"].values():
        installed = root / "etc/munge/munge.key"
        assert installed.read_bytes() == key and oct(installed.stat().st_mode & 0o777) == "0o600"
    leaked = [str(p) for p in applied["state"].rglob("*") if p.is_file() and value[:40].encode() in p.read_bytes()]
    assert leaked == [], f"the munge key is in runner artifacts: {leaked}"


def test_generated_files_installed_and_slurmd_named_by_slot(applied):
    ctl, node = applied["roots"]["ctl"], applied["roots"]["gpu-n1"]
    for root in (ctl, node):
        for var, name in (("slurm_conf_file", "slurm.conf"), ("slurm_gres_conf_file", "gres.conf"),
                          ("slurm_topology_conf_file", "topology.conf"), ("slurm_job_submit_lua_file", "job_submit.lua")):
            assert (root / "etc/slurm" / name).read_text() == Path(applied["files"][var]).read_text()
    assert 'SLURMD_OPTIONS="-N gpu-n1"' in (node / "etc/default/slurmd").read_text()
    assert not (ctl / "etc/default/slurmd").exists()
    assert (ctl / "var/spool/slurmctld").is_dir() and oct((ctl / "var/spool/slurmctld").stat().st_mode & 0o777) == "0o700"


def test_the_pinned_packages_are_installed_and_held(applied):
    import subprocess

    for host, daemon in (("ctl", "slurmctld"), ("gpu-n1", "slurmd")):
        root = applied["roots"][host]
        listing = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f=${Package} ${Version}\n"],
                                 capture_output=True, text=True, check=True).stdout
        installed = dict(line.split() for line in listing.splitlines())
        assert installed[daemon] == f"{VERSION}-1gpufleet1" and installed["slurm-client"] == f"{VERSION}-1gpufleet1"
        sel = subprocess.run(["chroot", str(root), "dpkg", "--get-selections", daemon, "slurm-client"],
                             capture_output=True, text=True, check=True).stdout
        assert sel.split() == [daemon, "hold", "slurm-client", "hold"]
        assert ("libpmix2" in installed) == (host == "gpu-n1")  # PMIx for srun --mpi=pmix on the nodes only
