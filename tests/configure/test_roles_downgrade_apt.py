"""Rollback really downgrades, apt family: the roles move a Debian root from a newer BOM's pins to an
older one's, for real (no check mode), and stay idempotent there.

The local flat repository holds two releases of the driver, fabric manager, NCCL and DCGM (dummy
.debs built with dpkg-deb, apt_fixture_repo.py). The roles apply the newer BOM, then the older
one, as `gpufleet upgrade --rollback` does; apt without --allow-downgrades refuses that ("E:
Packages were downgraded and -y was used without --allow-downgrades."). A rollback to a version
the repository does not have fails and names the package.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from apt_fixture_repo import install_into, local_site_vars, publish
from configure_host import PROJECT_ROOT, Overlay, chroot
from gpufleet.bom import Bom, load_bom
from gpufleet.configure.inventory import ChrootConnection, Node
from gpufleet.configure.runner import AnsibleConfigurator, RunResult, Verdict

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

OS = "ubuntu-22.04"
HOST = "downgrade-n1"
ROLES = ("nvidia_driver", "nccl_tuning", "dcgm")  # the pinned packages a rollback moves
NEWER = {'version: "570.172.08"': 'version: "570.195.03"', 'version: "2.27.5"': 'version: "2.27.7"',
         'version: "4.2.3"': 'version: "4.4.1"'}


def bom_with(tmp: Path, name: str, replacements: dict[str, str]) -> Bom:
    text = (PROJECT_ROOT / "images" / "bom.yaml").read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / name
    path.write_text(text)
    return load_bom(path)


def installed(root: Path) -> dict[str, str]:
    listing = chroot(root, "dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n")
    return {f[0]: f[1] for f in (line.split() for line in listing.splitlines()) if f[2] in ("ii", "hi")}


def held(root: Path) -> set[str]:
    return {f[0] for f in (line.split() for line in chroot(root, "dpkg", "--get-selections").splitlines())
            if f[1] == "hold"}


@pytest.fixture(scope="module")
def node(base_rootfs, collections_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("downgrade-apt")
    older, newer = load_bom(), bom_with(tmp, "newer-bom.yaml", NEWER)
    playbooks = tmp / "playbooks"
    playbooks.mkdir()
    (playbooks / "roles").symlink_to(PROJECT_ROOT / "playbooks" / "roles")
    (playbooks / "downgrade.yml").write_text(
        "---\n- name: The pinned packages a rollback moves\n  hosts: gpu\n  gather_facts: true\n  roles:\n"
        + "".join(f"    - role: {r}\n" for r in ROLES))
    ov = Overlay([base_rootfs], tmp)
    try:
        install_into(ov.root, older, OS, tmp)
        added = publish(ov.root, newer, OS, tmp)
        conf = AnsibleConfigurator(tmp / "state", playbook_dir=playbooks, collections=collections_dir)

        def apply(bom: Bom, run_id: str) -> RunResult:
            return conf.run([Node(slot=HOST, address=str(ov.root))], ChrootConnection(), local_site_vars(bom, OS),
                            playbook="downgrade.yml", run_id=run_id)

        yield {"root": ov.root, "older": older, "newer": newer, "added": added, "apply": apply, "tmp": tmp}
    finally:
        ov.close()


def test_the_newer_then_the_older_bom_leaves_the_older_versions_installed_held_and_idempotent(node):
    root, older, newer = node["root"], node["older"], node["newer"]
    assert {p.name for p in node["added"]} >= {"nvidia-driver-570-open", "nvidia-fabricmanager-570", "libnccl2",
                                               "datacenter-gpu-manager-4-core"}
    up = node["apply"](newer, "newer").hosts[HOST]
    assert up.verdict is Verdict.OK, up
    now = installed(root)
    assert now["nvidia-driver-570-open"] == "570.195.03-0ubuntu1" and now["libnccl2"].startswith("2.27.7-")
    assert now["nvidia-fabricmanager-570"] == "570.195.03-1" and now["datacenter-gpu-manager-4-core"] == "1:4.4.1-1"

    back = node["apply"](older, "rollback").hosts[HOST]
    assert back.verdict is Verdict.OK, back
    v, now = older.component_versions(OS), installed(root)
    assert now["nvidia-driver-570-open"] == f"{v['nvidia_driver']}-0ubuntu1"
    assert now["nvidia-fabricmanager-570"] == f"{v['fabric_manager']}-1"
    assert now["libnccl2"].startswith(v["nccl"] + "-") and now["datacenter-gpu-manager-4-core"] == f"1:{v['dcgm']}-1"
    assert {"nvidia-driver-570-open", "nvidia-fabricmanager-570", "libnccl2", "datacenter-gpu-manager-4-core"} <= held(root)
    assert any("Install the pinned NCCL" in t for t in back.changed), back.changed

    again = node["apply"](older, "again").hosts[HOST]
    assert again.verdict is Verdict.OK, again
    assert again.changed == (), f"not idempotent after the rollback: {again.changed}"


def test_a_rollback_to_a_version_the_repository_lacks_fails_naming_the_package(node):
    missing = bom_with(node["tmp"], "missing-bom.yaml", {'version: "2.27.5"': 'version: "2.27.3"'})
    before = installed(node["root"])
    r = node["apply"](missing, "missing").hosts[HOST]
    assert r.verdict is Verdict.FAILED, r
    assert r.task == "Install the pinned NCCL" and "libnccl2=2.27.3" in r.message, r
    assert installed(node["root"]) == before  # nothing half-moved
