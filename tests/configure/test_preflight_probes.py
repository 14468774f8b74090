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
