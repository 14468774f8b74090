"""remediate.yml's GPU reset: what must let go of the GPUs first, and the check that nothing still does.

Why: `nvidia-smi -r` fails while any process holds /dev/nvidia*, and --query-compute-apps lists only
compute contexts: dcgm-exporter's embedded host engine and slurmd's NVML handle are not among them
(node-config-review M8).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _play() -> dict:
    return yaml.safe_load((REPO / "playbooks" / "remediate.yml").read_text())[0]


def _holders_cmd() -> str:
    reset = next(t for t in _play()["tasks"] if t.get("name") == "Reset the GPUs of an idle node")
    task = next(t for t in reset["block"] if t.get("name", "").startswith("List what still holds"))
    return task["ansible.builtin.shell"]


def test_the_services_that_hold_the_gpus_are_stopped_before_a_reset():
    services = _play()["vars"]["gpufleet_remediate_gpu_services"]
    assert {"nvidia-dcgm-exporter", "nvidia-dcgm", "slurmd", "nvidia-persistenced"} <= set(services)
    assert "nvidia-fabricmanager" not in services  # NVSwitch systems keep their fabric across a reset


@pytest.mark.skipif(shutil.which("fuser") is None, reason="fuser (psmisc) is what the node runs")
def test_a_device_still_held_open_is_named(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_text("")
    cmd = _holders_cmd().replace("/dev/", f"{dev}/")
    assert subprocess.run(["bash", "-c", cmd], capture_output=True, text=True).stdout.strip() == ""
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(dev / 'nvidia0')!r}); import time; time.sleep(30)"])
    try:
        for _ in range(50):  # until the holder has the file open
            out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True).stdout
            if out.strip():
                break
            subprocess.run(["sleep", "0.1"])
        assert str(holder.pid) in out and "nvidia0" in out, out
    finally:
        holder.kill()
