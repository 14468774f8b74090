"""An EFA-enabled FSx for Lustre file system is reached over EFA (node-config-review M6,
aws-program-review B4): the lustre_client role renders AWS's LNet-over-EFA setup as a boot unit the
fstab mount requires.

Why: the role wrote only an `@tcp` fstab line, so clients reached a file system planned at EFA
bandwidth through one ENA card. AWS's steps (EKS user guide, "Optimize Amazon FSx for Lustre
performance on nodes (EFA)", https://docs.aws.amazon.com/eks/latest/userguide/fsx-csi-tuning-efa.html):
EFA driver >= 2.12.1; modprobe lnet, kefalnd ipif_name=<eth>, ksocklnd; lnetctl lnet configure; a tcp
NI; efa NIs with --peer-credits 32 (p5/p5e: every 4th of the 32 devices, others: first and last);
discovery 1; udsp --src efa --priority 0; modprobe lustre; mount <dns>@tcp:/<mountname>. The rendered
script runs here under bash against recording stubs of those tools.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from gpufleet import catalog
from gpufleet.bom import load_bom, resolve_bom_path
from gpufleet.configure.executor import stack_executor
from gpufleet.configure.extravars import LustreMount, configure_extravars
from gpufleet.configure.inventory import SshConnection
from gpufleet.errors import ConfigError
from gpufleet.project import find_project
from gpufleet.spec import load_stack

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "playbooks/roles/lustre_client"
FSX = LustreMount("fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com", "abcdefgh", "/fsx", efa=True)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["quote"] = lambda v: shlex.quote(str(v))
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1")
    return env


def _role_vars(**overrides) -> dict:
    """The role's defaults (the plain ones; the fact-derived ones replaced), then the overrides."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    values = {k: v for k, v in defaults.items() if not (isinstance(v, str) and "{{" in v)}
    return values | overrides


def _render(template: str, **overrides) -> str:
    return _env().from_string((ROLE / "templates" / template).read_text()).render(**_role_vars(**overrides))


def _fstab_line(**overrides) -> str:
    expr = yaml.safe_load((ROLE / "vars/main.yml").read_text())["lustre_client_fstab_line"]
    values = _role_vars(lustre_client_fs_dns=FSX.dns_name, lustre_client_mount_name=FSX.mount_name,
                        lustre_client_mount_path="/fsx", **overrides)
    values["lustre_client_mount_options"] = _env().from_string(
        yaml.safe_load((ROLE / "defaults/main.yml").read_text())["lustre_client_mount_options"]).render()
    return _env().from_string(expr).render(**values)


# --- the stack's choice reaches the role ----------------------------------------------------------

def test_prod_gpu_nodes_get_lnet_over_efa_for_its_efa_enabled_file_system():
    project = find_project(ROOT)
    spec = load_stack("prod", project.stacks_dir)
    assert spec.storage.efa_enabled and spec.cluster.instance_type == "p5.48xlarge"
    ex = stack_executor(spec, project, "prod", SshConnection(user="ubuntu"),
                        lustre=LustreMount(FSX.dns_name, FSX.mount_name, "/fsx"))
    assert ex.site_vars["lustre_client_efa"] is True and ex.site_vars["lustre_client_efa_stride"] == 4
    dev = load_stack("dev", project.stacks_dir)
    assert not dev.storage.efa_enabled
    plain = stack_executor(dev, project, "dev", SshConnection(user="ubuntu"),
                           lustre=LustreMount(FSX.dns_name, FSX.mount_name, "/fsx"))
    assert "lustre_client_efa" not in plain.site_vars


def test_p5en_uses_the_first_and_last_device_and_no_efa_instance_is_refused():
    spec = load_stack("prod")
    bom = load_bom(resolve_bom_path(spec, find_project(ROOT)))
    p5en = configure_extravars(bom, "ubuntu-22.04", catalog.CATALOG["p5en.48xlarge"], lustre=FSX)
    assert p5en["lustre_client_efa"] is True and p5en["lustre_client_efa_stride"] == 0
    no_efa = dataclasses.replace(catalog.CATALOG["p5.48xlarge"], name="x.large", interfaces=())
    with pytest.raises(ConfigError, match="efaEnabled: x.large has no EFA interface"):
        configure_extravars(bom, "ubuntu-22.04", no_efa, lustre=FSX)


def test_the_mount_requires_the_lnet_unit_only_for_an_efa_enabled_file_system():
    efa = _fstab_line(lustre_client_efa=True).split()
    assert efa[0] == f"{FSX.dns_name}@tcp:/{FSX.mount_name}"  # AWS mounts the MGS @tcp; data moves to efa
    assert "x-systemd.requires=gpufleet-lustre-efa.service" in efa[3].split(",")
    assert "x-systemd.requires=network-online.target" in efa[3].split(",")
    plain = _fstab_line(lustre_client_efa=False).split()
    assert not [o for o in plain[3].split(",") if "gpufleet-lustre-efa" in o]


def test_the_unit_runs_the_script_once_per_boot_after_the_network():
    unit = _render("gpufleet-lustre-efa.service.j2")
    assert "Type=oneshot" in unit and "RemainAfterExit=yes" in unit
    assert "ExecStart=/usr/local/sbin/gpufleet-lustre-efa-lnet" in unit
    assert "After=network-online.target" in unit and "WantedBy=multi-user.target" in unit


# --- the rendered script, run against stubs --------------------------------------------------------

STUBS = {
    "modinfo": 'echo "${EFA_VERSION:-2.13.0g}"',
    "ip": 'echo "default via 10.0.0.1 dev ens32 proto dhcp src 10.0.0.5 metric 100"',
    "findmnt": 'exit "${MOUNTED:-1}"',
    "modprobe": "true",
    "lnetctl": ('if [ "$1 $2" = "net show" ]; then\n'
                '  if [ "${3:-}" = "--net" ]; then exit 1; fi\n'
                '  grep -o "^net add --net efa --if [^ ]*" "$LOG" | sed "s/.*--if \\(.*\\)/    - nid: 10.0.0.5@efa  # \\1/"\n'
                '  exit 0\nfi'),
}


def _run(tmp_path: Path, devices: list[str], stride: int, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    sysfs = tmp_path / "infiniband"
    sysfs.mkdir()
    for d in devices:
        (sysfs / d).mkdir()
    script = tmp_path / "gpufleet-lustre-efa-lnet"
    script.write_text(_render("gpufleet-lustre-efa-lnet.sh.j2", lustre_client_efa_sysfs=str(sysfs),
                              lustre_client_efa_stride=stride))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    log.touch()
    for name, body in STUBS.items():
        # each call logged as "tool args", lnetctl's as its args alone (net show reads what was added)
        logged = '"$*"' if name == "lnetctl" else f'"{name} $*"'
        stub = bin_dir / name
        stub.write_text(f'#!/bin/bash\necho {logged} >> "$LOG"\n{body}\n')
        stub.chmod(0o755)
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30,
                            env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), **env})
    return result, log.read_text().splitlines()


P5_DEVICES = [f"rdmap{n}s0" for n in range(79, 111)]  # 32, sorted as ls sorts them


def test_p5_adds_a_tcp_ni_and_eight_efa_nis_then_discovery_and_the_udsp_rule(tmp_path):
    result, calls = _run(tmp_path, P5_DEVICES, 4)
    assert result.returncode == 0, result.stderr
    efa = [c.split("--if ")[1] for c in calls if c.startswith("net add --net efa")]
    assert efa == [f"{d} --peer-credits 32" for d in sorted(P5_DEVICES)[::4]] and len(efa) == 8
    assert "modprobe kefalnd ipif_name=ens32" in calls
    order = [c for c in calls if not c.startswith(("modinfo", "ip ", "findmnt", "net show"))]
    assert order[:4] == ["modprobe lnet", "modprobe kefalnd ipif_name=ens32", "modprobe ksocklnd", "lnet configure"]
    assert order[4:6] == ["net del --net tcp", "net add --net tcp --if ens32"]
    assert order[-3:] == ["set discovery 1", "udsp add --src efa --priority 0", "modprobe lustre"]
    assert "8 efa NI(s)" in result.stdout


def test_p5en_adds_the_first_and_last_device(tmp_path):
    devices = [f"rdmap{n}s0" for n in range(10, 26)]
    result, calls = _run(tmp_path, devices, 0)
    assert result.returncode == 0, result.stderr
    efa = [c.split()[5] for c in calls if c.startswith("net add --net efa")]
    assert efa == ["rdmap10s0", "rdmap25s0"]


def test_an_efa_driver_older_than_2_12_1_stops_before_lnet(tmp_path):
    result, calls = _run(tmp_path, P5_DEVICES, 4, EFA_VERSION="2.10.0g")
    assert result.returncode == 1 and "EFA driver 2.10.0 is older than 2.12.1" in result.stderr
    assert not [c for c in calls if c.startswith(("modprobe", "lnet configure", "net add"))]


def test_a_file_system_mounted_over_tcp_is_refused_not_cut(tmp_path):
    result, calls = _run(tmp_path, P5_DEVICES, 4, MOUNTED="0")
    assert result.returncode == 1 and "mounted over TCP" in result.stderr
    assert not [c for c in calls if c.startswith(("modprobe", "net del", "net add"))]


def test_no_efa_device_is_an_error(tmp_path):
    result, _ = _run(tmp_path, [], 0)
    assert result.returncode == 1 and "no EFA device" in result.stderr


def test_rendered_script_is_valid_bash():
    script = _render("gpufleet-lustre-efa-lnet.sh.j2", lustre_client_efa_stride=4)
    assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0
    assert os.path.basename(_role_vars()["lustre_client_efa_script"]) == "gpufleet-lustre-efa-lnet"
