"""The driver role after a driver change on a live node, for real in the Debian root: the old
driver's modules unloaded (users first), the installed driver's loaded, the loaded version checked
against the pin, the fabric manager restarted to match; a rollback does the same back to the older
driver, and a second run changes nothing. A module held open with reboots not allowed fails naming
it (with reboots allowed the role reboots; that needs a machine, not a root).

A root cannot load kernel modules, so two tools stand in for the kernel and systemd: `modprobe`
(unloading fails with kmod's own "Module nvidia is in use" while a GPU is held; loading a module
already loaded does nothing; loading `nvidia` makes the version dpkg installed the loaded one, as
the kernel would load the module on disk) and
`systemctl` (records the calls, answers `show` as for a running unit). Everything else, the
packages moving between two releases in the flat apt repository included, is real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from apt_fixture_repo import install_into, local_site_vars, publish
from configure_host import PROJECT_ROOT, Overlay
from gpufleet.bom import Bom, load_bom
from gpufleet.configure.inventory import ChrootConnection, Node
from gpufleet.configure.runner import AnsibleConfigurator, RunResult, Verdict
from node_stubs import STUB_DATA, install_tool
from test_roles_downgrade_apt import NEWER, OS, bom_with, installed

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

HOST = "reload-n1"
DEFAULTS = yaml.safe_load((PROJECT_ROOT / "playbooks/roles/nvidia_driver/defaults/main.yml").read_text())
DRIVER = "nvidia-driver-570-open"
STUBS = f"/{STUB_DATA}"
MODPROBE = f"""
echo "modprobe $*" >> {STUBS}/calls.log
if [ "$1" = "-r" ]; then
  shift
  if [ -e {STUBS}/held ]; then echo "modprobe: FATAL: Module nvidia is in use." >&2; exit 1; fi
  for m in "$@"; do sed -i "/^$m /d" {STUBS}/proc-modules; done
  exit 0
fi
grep -q "^$1 " {STUBS}/proc-modules && exit 0  # loaded already: modprobe does nothing
echo "$1 1974272 0 - Live 0x0000000000000000 (PO)" >> {STUBS}/proc-modules
if [ "$1" = nvidia ]; then
  mkdir -p {STUBS}/sys/module/nvidia
  dpkg-query -W -f='${{Version}}' {DRIVER} | sed 's/-.*//' > {STUBS}/sys/module/nvidia/version
fi
"""
SYSTEMCTL = f"""
echo "systemctl $*" >> {STUBS}/calls.log
case "$1" in
  show) printf 'Id=%s\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\nUnitFileState=enabled\\n' "$2" ;;
  is-enabled) echo enabled ;;
  is-active) echo active ;;
esac
exit 0
"""


def loaded(root: Path) -> tuple[list[str], str]:
    mods = [line.split()[0] for line in (root / STUB_DATA / "proc-modules").read_text().splitlines() if line.strip()]
    return mods, (root / STUB_DATA / "sys/module/nvidia/version").read_text().strip()


def calls(root: Path) -> list[str]:
    log = root / STUB_DATA / "calls.log"
    out = log.read_text().splitlines() if log.exists() else []
    log.write_text("")
    return out


@pytest.fixture(scope="module")
def node(base_rootfs, collections_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("driver-reload")
    older, newer = load_bom(), bom_with(tmp, "newer-bom.yaml", NEWER)
    playbooks = tmp / "playbooks"
    playbooks.mkdir()
    (playbooks / "roles").symlink_to(PROJECT_ROOT / "playbooks" / "roles")
    (playbooks / "driver.yml").write_text(
        "---\n- name: The driver role on a live node\n  hosts: gpu\n  gather_facts: true\n  roles:\n"
        "    - role: nvidia_driver\n")
    ov = Overlay([base_rootfs], tmp)
    try:
        install_into(ov.root, older, OS, tmp)
        publish(ov.root, newer, OS, tmp)
        conf = AnsibleConfigurator(tmp / "state", playbook_dir=playbooks, collections=collections_dir)
        boot = AnsibleConfigurator(tmp / "boot", playbook_dir=playbooks, collections=collections_dir)
        base = local_site_vars(older, OS)
        assert boot.run([Node(slot=HOST, address=str(ov.root))], ChrootConnection(), base, playbook="driver.yml",
                        run_id="image").hosts[HOST].verdict is Verdict.OK  # the image: the older driver, not live
        for tool, script in (("modprobe", MODPROBE), ("systemctl", SYSTEMCTL)):
            install_tool(ov.root, f"/usr/local/sbin/{tool}", script)
        data = ov.root / STUB_DATA
        (data / "sys/module/nvidia").mkdir(parents=True)
        # the booted node runs the image's driver
        (data / "proc-modules").write_text("".join(f"{m} 1974272 0 - Live 0x0000000000000000 (PO)\n"
                                                   for m in ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")))
        (data / "sys/module/nvidia/version").write_text(older.component_versions(OS)["nvidia_driver"] + "\n")

        def apply(bom: Bom, run_id: str, **more) -> RunResult:
            ev = local_site_vars(bom, OS) | {"gpufleet_live_system": True, "gpufleet_enable_services": True,
                                             "nvidia_driver_proc_modules_path": f"{STUBS}/proc-modules",
                                             "nvidia_driver_sysfs_module_path": f"{STUBS}/sys/module", **more}
            return conf.run([Node(slot=HOST, address=str(ov.root))], ChrootConnection(), ev, playbook="driver.yml",
                            run_id=run_id)

        yield {"root": ov.root, "older": older, "newer": newer, "apply": apply}
    finally:
        ov.close()


def test_a_driver_change_reloads_the_modules_and_restarts_the_fabric_manager_both_ways(node):
    root, older, newer = node["root"], node["older"], node["newer"]
    calls(root)
    for bom, run_id in ((newer, "upgrade"), (older, "rollback")):
        pin = bom.component_versions(OS)["nvidia_driver"]
        running = loaded(root)[0]
        r = node["apply"](bom, run_id).hosts[HOST]
        assert r.verdict is Verdict.OK, r
        assert installed(root)[DRIVER].startswith(pin + "-")
        done = calls(root)
        expected = "modprobe -r " + " ".join(m for m in DEFAULTS["nvidia_driver_unload_order"] if m in running)
        assert expected.endswith(" nvidia") and expected in done, "\n".join(done)  # every loaded one, users first
        unload = done.index(expected)
        stopped = [i for i, c in enumerate(done) if c.startswith("systemctl stop")]
        assert stopped and max(stopped) < unload  # dcgm, fabric manager, persistenced let go of the GPUs first
        assert done.index("modprobe nvidia") > unload and "modprobe nvidia_uvm" in done
        mods, version = loaded(root)
        assert version == pin and sorted(mods) == sorted(DEFAULTS["nvidia_driver_load_modules"])  # the pin runs now
        assert [c for c in done[unload:] if c.startswith("systemctl restart")] == [
            "systemctl restart nvidia-persistenced", "systemctl restart nvidia-fabricmanager"], done

    again = node["apply"](older, "again").hosts[HOST]
    assert again.verdict is Verdict.OK, again
    assert again.changed == (), f"not idempotent after the rollback: {again.changed}"
    done = calls(root)
    assert not [c for c in done if c.startswith(("modprobe", "systemctl restart", "systemctl stop"))], done


def test_a_module_held_open_without_reboots_fails_naming_it_and_leaves_the_loaded_driver(node):
    root, older, newer = node["root"], node["older"], node["newer"]
    (root / STUB_DATA / "held").write_text("")
    try:
        r = node["apply"](newer, "held", nvidia_driver_reboot_allowed=False).hosts[HOST]
    finally:
        (root / STUB_DATA / "held").unlink()
    assert r.verdict is Verdict.FAILED, r
    assert r.task == "Fail naming the held modules when a reboot is not allowed", r
    assert "Module nvidia is in use" in r.message and "reboot it" in r.message, r.message
    assert loaded(root)[1] == older.component_versions(OS)["nvidia_driver"]  # the old driver still runs
