"""The preflight's version probes find the tools where the vendors' packages put them.

Why: the probe for the aws-ofi-nccl plugin once looked only in /opt/amazon/ofi-nccl/lib/, while the
EFA installer's libnccl-ofi deb installs into the multiarch directory and some rpm layouts into
lib64/ (node-config-review F3: tool-missing on every Ubuntu node). Each layout here is a vendor's;
the probe is the playbook's own command, run with /opt moved under a temporary root.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# the line aws-ofi-nccl logs at init (src/nccl_ofi_net.c), which `strings` finds in the library
INIT_LINE = "NET/OFI Initializing aws-ofi-nccl 1.16.3"


def _probe(key: str) -> str:
    play = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())[0]
    return next(c["cmd"] for c in play["vars"]["gpufleet_version_commands"] if c["key"] == key)


@pytest.mark.skipif(shutil.which("strings") is None, reason="binutils' strings is what the node runs")
@pytest.mark.parametrize("layout", [
    "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so",  # libnccl-ofi .deb (multiarch)
    "opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so",                 # rpm layouts, installer >= 1.44
    "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",                    # rpm layout of the 1.4x installers
])
def test_the_plugin_probe_finds_each_vendor_layout(tmp_path, layout):
    lib = tmp_path / layout
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF\0\0" + INIT_LINE.encode() + b"\0\0")
    cmd = _probe("aws_ofi_nccl").replace("/opt/", f"{tmp_path}/opt/")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == INIT_LINE, out


def test_no_plugin_is_a_missing_tool(tmp_path):
    cmd = _probe("aws_ofi_nccl").replace("/opt/", f"{tmp_path}/opt/")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    assert out.returncode == 2 and "No such file or directory" in out.stdout


def _rendered(name: str, **overrides):
    """A preflight play var as Ansible renders it (its Jinja over the play's own vars)."""
    import jinja2

    play_vars = yaml.safe_load((REPO / "playbooks" / "preflight.yml").read_text())[0]["vars"] | overrides
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["quote"] = __import__("shlex").quote

    def render(value):
        if isinstance(value, str):
            for _ in range(5):
                value = env.from_string(value).render(**play_vars)
            return value
        if isinstance(value, list):
            return [render(v) for v in value]
        if isinstance(value, dict):
            return {k: render(v) for k, v in value.items()}
        return value
    return render(play_vars[name])


def test_the_container_check_uses_the_runtime_the_roles_install():
    """node-config-review F5: no role installs docker; containerd (and NVIDIA's runtime) they do."""
    command = next(c for c in _rendered("gpufleet_commands") if c["name"] == "container-gpus.txt")["cmd"]
    assert "docker" not in command
    assert "ctr -n k8s.io run --rm --runc-binary=/usr/bin/nvidia-container-runtime" in command
    assert "--env NVIDIA_VISIBLE_DEVICES=all" in command and command.rstrip().endswith("nvidia-smi -L")
    assert command.index("images pull") < command.index(" run ")  # the probe image is there before the run


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_the_dcgm_run_is_bounded_by_its_level_and_cleaned_up_after_a_timeout(level):
    """node-config-review M5: one 3600 s bound cut level 4 (1-2 h by DCGM's guide) short."""
    from gpufleet.spec import SimDurations

    run = next(c for c in _rendered("gpufleet_commands", gpufleet_dcgm_level=level) if c["name"] == "dcgmi-diag.json")
    assert int(run["timeout"]) >= 1.5 * SimDurations().dcgm_level[level]
    assert run["cmd"] == f"dcgmi diag -r {level} -j" and run["on_timeout"] == "systemctl restart nvidia-dcgm"


def test_the_nccl_tests_the_preflight_runs_are_the_ones_a_role_builds():
    """node-config-review F6: the preflight ran /opt/nccl-tests/build/all_reduce_perf, which nothing built."""
    role = yaml.safe_load((REPO / "playbooks/roles/nccl_tuning/defaults/main.yml").read_text())
    tasks = yaml.safe_load((REPO / "playbooks/roles/nccl_tuning/tasks/main.yml").read_text())
    assert _rendered("gpufleet_nccl_tests_dir") == role["nccl_tuning_tests_dir"] + "/build"  # the Makefile's BUILDDIR
    checkout = next(t for t in tasks if "ansible.builtin.git" in t)["ansible.builtin.git"]
    assert checkout["version"] == "{{ nccl_tuning_tests_commit }}"  # a commit, not a moving branch or tag
    assert len(role["nccl_tuning_tests_commit"]) == 40 and role["nccl_tuning_build_tests"] is True
    build = next(t for t in tasks if t.get("name", "").startswith("Build nccl-tests"))["ansible.builtin.command"]
    assert "MPI=0" in build["argv"] and "NCCL_HOME=/usr" in build["argv"]


def test_slurm_steps_keep_the_nodes_memlock():
    """node-config-review M7: Slurm propagates the submitting shell's limits to steps by default."""
    from gpufleet.plan import build_plan
    from gpufleet.pool.slurm.conf import RealFlavour, generate
    from gpufleet.spec import load_stack

    spec = load_stack("dev")
    conf = generate(spec, build_plan(spec), RealFlavour(controller_host="h", controller_address="10.0.16.10"),
                    "24.11.6").slurm_conf
    assert "PropagateResourceLimitsExcept=MEMLOCK" in conf.splitlines()


def test_the_efa_loopback_forces_the_traffic_through_the_nic():
    """node-config-review M9: P2P and SHM off still leave NVLS (NVSwitch SHARP) carrying the all_reduce."""
    cmd = next(c for c in _rendered("gpufleet_commands") if c["name"] == "nccl-efa-loopback.txt")["cmd"]
    for setting in ("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_NVLS_ENABLE=0", "NCCL_ALGO=Ring"):
        assert setting in cmd.split(), setting
