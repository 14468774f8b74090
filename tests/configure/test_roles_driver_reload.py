"""The driver and EFA roles after a driver change on a live node, for real in the Debian root: the
services that hold the GPUs (dcgm-exporter and slurmd too) stopped, the old driver's modules unloaded
(users first, efa_nv_peermem among them), the installed driver's loaded, the loaded version checked
against the pin, the fabric manager restarted to match, the other services started again, and the EFA
installer run again so efa_nv_peermem is rebuilt for the new driver and loaded (node-config-review
F13); a rollback does the same back to the older driver, and a second run changes nothing. A module
held open with reboots not allowed fails naming it (with reboots allowed the role reboots; that needs
a machine, not a root). After an EFA installer run the old efa module is unloaded and the new one
loaded, or, while something holds it, a reboot is flagged.

A root cannot load kernel modules, so three tools stand in for the kernel and systemd: `modprobe`
(unloading fails with kmod's own "Module nvidia is in use" while a GPU is held, or "Module efa is in
use" for efa while an EFA device is; loading a module already loaded does nothing; loading `nvidia`
makes the version dpkg installed the loaded one, as the kernel would load the module on disk;
/sys/module/<name> follows), `modinfo -n` (the EFA modules are on disk) and `systemctl` (records the
calls; a unit runs until stopped, and `show`/`is-active` say so). Everything else, the
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
  for m in "$@"; do
    if [ "$m" = efa ] && [ -e {STUBS}/held-efa ]; then echo "modprobe: FATAL: Module efa is in use." >&2; exit 1; fi
  done
  for m in "$@"; do sed -i "/^$m /d" {STUBS}/proc-modules; [ "$m" = nvidia ] || rm -rf {STUBS}/sys/module/$m; done
  exit 0
fi
grep -q "^$1 " {STUBS}/proc-modules && exit 0  # loaded already: modprobe does nothing
echo "$1 1974272 0 - Live 0x0000000000000000 (PO)" >> {STUBS}/proc-modules
mkdir -p {STUBS}/sys/module/$1
if [ "$1" = nvidia ]; then
  dpkg-query -W -f='${{Version}}' {DRIVER} | sed 's/-.*//' > {STUBS}/sys/module/nvidia/version
fi
"""
MODINFO = """
[ "$1" = -n ] && case "$2" in efa|efa_nv_peermem) echo "/lib/modules/$(uname -r)/updates/$2.ko"; exit 0 ;; esac
echo "modinfo: ERROR: Module $2 not found." >&2
exit 1
"""
SYSTEMCTL = f"""
echo "systemctl $*" >> {STUBS}/calls.log
touch {STUBS}/stopped
case "$1" in
  stop) echo "$2" >> {STUBS}/stopped ;;
  start|restart) sed -i "/^$2$/d" {STUBS}/stopped ;;
  show)
    if grep -qx "$2" {STUBS}/stopped; then state='ActiveState=inactive\nSubState=dead'
    else state='ActiveState=active\nSubState=running'; fi
    printf "Id=%s\nLoadState=loaded\n$state\nUnitFileState=enabled\n" "$2" ;;
  is-enabled) echo enabled ;;
  is-active) if grep -qx "$2" {STUBS}/stopped; then echo inactive; exit 3; fi; echo active ;;
esac
exit 0
"""
EFA_MODULES = ("efa", "efa_nv_peermem")


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
        "    - role: nvidia_driver\n    - role: efa\n")
    ov = Overlay([base_rootfs], tmp)
    try:
        install_into(ov.root, older, OS, tmp)
        publish(ov.root, newer, OS, tmp)
        conf = AnsibleConfigurator(tmp / "state", playbook_dir=playbooks, collections=collections_dir)
        boot = AnsibleConfigurator(tmp / "boot", playbook_dir=playbooks, collections=collections_dir)
        base = local_site_vars(older, OS)
        assert boot.run([Node(slot=HOST, address=str(ov.root))], ChrootConnection(), base, playbook="driver.yml",
                        run_id="image").hosts[HOST].verdict is Verdict.OK  # the image: the older driver, not live
        for tool, script in (("modprobe", MODPROBE), ("modinfo", MODINFO), ("systemctl", SYSTEMCTL)):
            install_tool(ov.root, f"/usr/local/sbin/{tool}", script)
        data = ov.root / STUB_DATA
        (data / "sys/module/nvidia").mkdir(parents=True)
        # the booted node runs the image's driver, EFA and GPUDirect RDMA's efa_nv_peermem
        booted = ("efa_nv_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia", "efa")
        (data / "proc-modules").write_text("".join(f"{m} 1974272 0 - Live 0x0000000000000000 (PO)\n" for m in booted))
        for m in EFA_MODULES:
            (data / "sys/module" / m).mkdir(parents=True)
        (data / "sys/module/nvidia/version").write_text(older.component_versions(OS)["nvidia_driver"] + "\n")

        def apply(bom: Bom, run_id: str, **more) -> RunResult:
            ev = local_site_vars(bom, OS) | {"gpufleet_live_system": True, "gpufleet_enable_services": True,
                                             "nvidia_driver_proc_modules_path": f"{STUBS}/proc-modules",
                                             "nvidia_driver_sysfs_module_path": f"{STUBS}/sys/module",
                                             "efa_sysfs_module_path": f"{STUBS}/sys/module",
                                             "efa_reboot_flag_path": f"{STUBS}/reboot-required", **more}
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
        assert expected.startswith("modprobe -r efa_nv_peermem ")  # it holds nvidia's symbols (F13)
        unload = done.index(expected)
        stopped = [i for i, c in enumerate(done) if c.startswith("systemctl stop")]
        assert stopped and max(stopped) < unload  # dcgm, fabric manager, persistenced let go of the GPUs first
        for unit in ("nvidia-dcgm-exporter", "slurmd", "nvidia-dcgm"):  # the exporter and slurmd hold them too
            assert f"systemctl stop {unit}" in done[:unload], done
            assert f"systemctl start {unit}" in done[done.index("modprobe nvidia"):], done  # and run again after
        assert done.index("modprobe nvidia") > unload and "modprobe nvidia_uvm" in done
        # the EFA installer ran again and efa_nv_peermem, rebuilt for the new driver, was loaded again
        efa_unload = done.index("modprobe -r efa_nv_peermem efa")
        assert efa_unload > done.index("modprobe nvidia")
        assert done.index("modprobe efa") > efa_unload and done.index("modprobe efa_nv_peermem") > done.index("modprobe efa")
        mods, version = loaded(root)
        assert version == pin  # the pin runs now
        assert sorted(mods) == sorted([*DEFAULTS["nvidia_driver_load_modules"], *EFA_MODULES])
        # running again, the fabric manager on the new driver (systemd starts what a restart finds stopped)
        assert [c.split()[2] for c in done[unload:] if c.startswith(("systemctl restart", "systemctl start"))
                and c.split()[2] in ("nvidia-persistenced", "nvidia-fabricmanager")] == [
            "nvidia-persistenced", "nvidia-fabricmanager"], done

    again = node["apply"](older, "again").hosts[HOST]
    assert again.verdict is Verdict.OK, again
    assert again.changed == (), f"not idempotent after the rollback: {again.changed}"
    done = calls(root)
    assert not [c for c in done if c.startswith(("modprobe", "systemctl restart", "systemctl stop", "systemctl start"))], done


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


def test_an_efa_installer_run_flags_a_reboot_while_the_old_efa_module_is_held(node):
    root, older = node["root"], node["older"]
    flag = root / STUB_DATA / "reboot-required"
    flag.unlink(missing_ok=True)
    calls(root)
    (root / STUB_DATA / "held-efa").write_text("")
    try:  # the installer runs again as after a new release (or a driver change)
        r = node["apply"](older, "efa-held", efa_rebuild_after_driver_change=True).hosts[HOST]
    finally:
        (root / STUB_DATA / "held-efa").unlink()
    assert r.verdict is Verdict.OK, r
    done = calls(root)
    assert "modprobe -r efa_nv_peermem efa" in done and "modprobe efa" not in done, done
    assert "Module efa is in use" in flag.read_text() and "reboot" in flag.read_text()
    assert "efa" in loaded(root)[0]  # the old one still runs until the reboot


def test_an_efa_installer_run_reloads_the_efa_modules(node):
    root, older = node["root"], node["older"]
    flag = root / STUB_DATA / "reboot-required"
    flag.unlink(missing_ok=True)
    calls(root)
    r = node["apply"](older, "efa-reload", efa_rebuild_after_driver_change=True).hosts[HOST]
    assert r.verdict is Verdict.OK, r
    done = calls(root)
    unload = done.index("modprobe -r efa_nv_peermem efa")  # users first
    assert done.index("modprobe efa") > unload and done.index("modprobe efa_nv_peermem") > unload, done
    assert set(EFA_MODULES) <= set(loaded(root)[0]) and not flag.exists()
