"""Rollback really downgrades, dnf family: the roles move an AL2023 look-alike from a newer BOM's
pins to an older one's, for real (no check mode), and stay idempotent there.

The local RPM repositories hold two releases of the driver, fabric manager, NCCL and DCGM (dummy
RPMs built with rpmbuild, indexed with createrepo_c: rpm_fixture_repo.py). Ansible's dnf module
does nothing for a pin older than what is installed unless it may downgrade, and the newer
release's versionlock entry would stay beside the older one's (either satisfies dnf, so a later
`dnf upgrade` could climb back): after the rollback only the installed versions are locked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from configure_host import PROJECT_ROOT, Overlay, chroot, require_root
from gpufleet.bom import Bom, load_bom
from gpufleet.configure.extravars import LustreMount
from gpufleet.configure.inventory import ChrootConnection, Node
from gpufleet.configure.runner import AnsibleConfigurator, RunResult, Verdict
from rpm_fixture_repo import install_into, local_site_vars, publish

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

OS = "al2023"
HOST = "downgrade-al2023"
FSX = LustreMount("fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com", "hgfedcba", "/fsx")
ROLES = ("nvidia_driver", "nccl_tuning", "dcgm")  # the pinned packages a rollback moves
NEWER = {'version: "570.172.08"': 'version: "570.195.03"', 'version: "2.27.5"': 'version: "2.27.7"',
         'version: "4.2.3"': 'version: "4.4.1"'}
MOVED = ("nvidia-driver", "nvidia-fabric-manager", "libnccl", "datacenter-gpu-manager-4-core")


def bom_with(tmp: Path, name: str, replacements: dict[str, str]) -> Bom:
    text = (PROJECT_ROOT / "images" / "bom.yaml").read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / name
    path.write_text(text)
    return load_bom(path)


def rpms(root: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in chroot(root, "rpm", "-qa", "--qf", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n").splitlines():
        name, evr = line.split()
        out.setdefault(name, []).append(evr)
    return out


def locks(root: Path) -> list[str]:
    text = (root / "etc/dnf/plugins/versionlock.list").read_text()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def node(base_rootfs, dnf_layer, collections_dir, tmp_path_factory):
    require_root("an AL2023 look-alike chroot")
    tmp = tmp_path_factory.mktemp("downgrade-dnf")
    older, newer = load_bom(), bom_with(tmp, "newer-bom.yaml", NEWER)
    playbooks = tmp / "playbooks"
    playbooks.mkdir()
    (playbooks / "roles").symlink_to(PROJECT_ROOT / "playbooks" / "roles")
    (playbooks / "downgrade.yml").write_text(
        "---\n- name: The pinned packages a rollback moves\n  hosts: gpu\n  gather_facts: true\n  roles:\n"
        + "".join(f"    - role: {r}\n" for r in ROLES))
    ov = Overlay([dnf_layer, base_rootfs], tmp)
    try:
        urls = install_into(ov.root, older, OS, dnf_layer, tmp)
        added = publish(ov.root, newer, OS, dnf_layer, tmp)
        conf = AnsibleConfigurator(tmp / "state", playbook_dir=playbooks, collections=collections_dir)

        def apply(bom: Bom, run_id: str) -> RunResult:
            return conf.run([Node(slot=HOST, address=str(ov.root))], ChrootConnection(),
                            local_site_vars(bom, OS, urls, FSX), playbook="downgrade.yml", run_id=run_id)

        yield {"root": ov.root, "older": older, "newer": newer, "added": added, "apply": apply, "tmp": tmp}
    finally:
        ov.close()


def test_the_newer_then_the_older_bom_leaves_the_older_versions_installed_locked_and_idempotent(node):
    root, older, newer = node["root"], node["older"], node["newer"]
    assert {p.name for p in node["added"]} >= set(MOVED)
    up = node["apply"](newer, "newer").hosts[HOST]
    assert up.verdict is Verdict.OK, up
    now = rpms(root)
    assert now["nvidia-driver"] == ["3:570.195.03-1.amzn2023"] and now["libnccl"] == ["0:2.27.7-1+cuda12.8"]
    assert now["nvidia-fabric-manager"] == ["0:570.195.03-1"] and now["datacenter-gpu-manager-4-core"] == ["1:4.4.1-1"]

    back = node["apply"](older, "rollback").hosts[HOST]
    assert back.verdict is Verdict.OK, back
    v, now = older.component_versions(OS), rpms(root)
    assert now["nvidia-driver"] == [f"3:{v['nvidia_driver']}-1.amzn2023"]
    assert now["nvidia-fabric-manager"] == [f"0:{v['fabric_manager']}-1"]
    assert now["libnccl"] == [f"0:{v['nccl']}-1+cuda12.8"] and now["datacenter-gpu-manager-4-core"] == [f"1:{v['dcgm']}-1"]
    held = locks(root)
    for name in MOVED:
        mine = [lock for lock in held if lock.startswith(name + "-") and lock[len(name) + 1].isdigit()]
        assert mine == [f"{name}-{now[name][0]}.*"], (name, held)  # the newer release's lock is gone

    again = node["apply"](older, "again").hosts[HOST]
    assert again.verdict is Verdict.OK, again
    assert again.changed == (), f"not idempotent after the rollback: {again.changed}"


def test_a_rollback_to_a_version_the_repository_lacks_fails_naming_the_package(node):
    missing = bom_with(node["tmp"], "missing-bom.yaml", {'version: "2.27.5"': 'version: "2.27.3"'})
    before = rpms(node["root"])
    r = node["apply"](missing, "missing").hosts[HOST]
    assert r.verdict is Verdict.FAILED, r
    assert r.task == "Install the pinned NCCL (dnf)" and "libnccl-2.27.3" in r.message, r
    assert rpms(node["root"]) == before
