"""How each BOM component's installed version is read on a node and compared with the BOM.

Why one table: the preflight (playbooks/preflight.yml) runs each component's command and stores
its raw output in versions.json; the gates extract the version with the component's pattern
and compare it the component's way. A BOM pin is not always what a tool prints (the BOM pins the
CUDA toolkit `12.8.1`, nvcc prints its own build `V12.8.93`), so "equal strings" would quarantine
correctly built nodes. Each row cites the real output it reads (`example`, `source`); the tests
parse every example and every synthetic rendering (gpufleet.gates.synth) with these patterns.

Comparison kinds:
- exact: the printed version equals the pin (a leading `v` ignored).
- release: major.minor only, because the tool prints a number that is not the pinned one (see the
  row's `how`). Skew inside a release (12.8.0 vs 12.8.1) is then invisible to this gate; the image
  build (same BOM) is what pins the update.
- prefix: the pin's components are a prefix of the printed ones (kubelet `1.33.4` matches
  `v1.33.4-eks-e386d34`: the suffix is the distribution's build tag, not another release), unless
  what follows them is a pre-release tag or another number (`1.16.0-beta`, `1.16.0rc1`, `1.16.0.1`:
  other versions, so skew).
- kernel: the same major.minor family as the BOM's minimum and not older than it (kernels are
  patched in place; the BOM pins a floor, and the Lustre client is built per family).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from gpufleet.bom import Bom

Compare = Literal["exact", "release", "prefix", "kernel"]
POOL_AGENT = {"kubernetes": "kubelet", "slurm": "slurm"}  # the pool type -> the agent the BOM pins for it
AGENT_KEYS = frozenset(POOL_AGENT.values())
OS_KEY = "os_release"  # versions.json key of `cat /etc/os-release`: which of the BOM's OS pins apply


@dataclass(frozen=True)
class Component:
    key: str  # the BOM / versions.json key (gpufleet.bom.COMPONENT_KEYS)
    tool: str  # what an operator would install or look for when it is missing
    command: str  # what preflight.yml runs (stdout and stderr, exit code recorded)
    pattern: re.Pattern[str]  # group 1 (or the first non-empty group) is the version
    compare: Compare
    how: str  # why this comparison
    example: str  # a real output of the command
    source: str  # where the example comes from


def _c(key, tool, command, pattern, compare, how, example, source) -> Component:
    return Component(key, tool, command, re.compile(pattern, re.M), compare, how, example, source)


COMPONENTS: tuple[Component, ...] = (
    _c("nvidia_driver", "nvidia driver (kernel module)", "cat /proc/driver/nvidia/version",
       r"Kernel Module(?: for \w+)?\s+(\d{3}\.\d+(?:\.\d+)?)\b", "exact",
       "the loaded kernel module's version, which is the installed driver; fabric manager must equal it",
       "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
       "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)",
       "/proc/driver/nvidia/version (proprietary module; the open module reads 'NVIDIA UNIX Open Kernel "
       "Module for x86_64  <version>  Release Build ...')"),
    _c("fabric_manager", "nv-fabricmanager", "nv-fabricmanager --version",
       r"Fabric Manager version is\s*:?\s*(\d+\.\d+(?:\.\d+)?)", "exact",
       "fabric manager refuses to start unless it equals the driver exactly",
       "Fabric Manager version is : 570.172.08",
       "NVIDIA Fabric Manager user guide (`nv-fabricmanager --version`)"),
    _c("cuda", "nvcc (CUDA toolkit)", "nvcc --version",
       r"Cuda compilation tools, release (\d+\.\d+)\b", "release",
       "nvcc prints the toolkit release (12.8) and nvcc's own component build (V12.8.93), never the "
       "toolkit update the BOM pins (12.8.1 = 12.8 Update 1): each toolkit component carries its own "
       "patch number, so only the release major.minor is comparable",
       "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
       "Built on Fri_Feb_21_20:23:50_PST_2025\nCuda compilation tools, release 12.8, V12.8.93\n"
       "Build cuda_12.8.r12.8/compiler.35583870_0",
       "`nvcc --version` of CUDA 12.8 Update 1 (cuda_nvcc 12.8.93 in the 12.8.1 release notes)"),
    _c("dcgm", "dcgmi (DCGM)", "dcgmi --version",
       r"dcgmi\s+version:\s*(\d+\.\d+\.\d+)", "exact", "dcgmi prints the full DCGM release",
       "\ndcgmi  version: 3.3.9\n", "`dcgmi --version` as reported in NVIDIA/DCGM issues (two spaces, blank line first)"),
    _c("nccl", "NCCL library (libnccl.so.2)",
       "ls -1 /usr/lib/x86_64-linux-gnu/libnccl.so.2.* /usr/lib64/libnccl.so.2.* /usr/local/lib/libnccl.so.2.* "
       "/opt/nccl/build/lib/libnccl.so.2.* 2>/dev/null | sort -V | tail -n1 | grep . || "
       "{ echo 'libnccl.so.2.*: No such file or directory'; exit 2; }",
       r"libnccl\.so\.(\d+\.\d+\.\d+)\b", "exact",
       "the real file behind the libnccl.so.2 soname is named after the full release",
       "/usr/lib/x86_64-linux-gnu/libnccl.so.2.27.5",
       "NVIDIA NCCL packages (libnccl2 installs libnccl.so.2.<minor>.<patch>)"),
    _c("aws_ofi_nccl", "aws-ofi-nccl (NCCL net plugin)",
       "for f in /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so /opt/amazon/ofi-nccl/lib/libnccl-net.so "
       "/opt/amazon/ofi-nccl/lib/*-linux-gnu/libnccl-net*.so /opt/amazon/ofi-nccl/lib64/libnccl-net*.so "
       "/opt/aws-ofi-nccl/lib/libnccl-net.so; do [ -e \"$f\" ] && strings \"$f\" | grep -m1 -E "
       "'NET/OFI (Initializing|Using) aws-ofi-nccl' && exit 0; done; "
       "echo 'libnccl-net-ofi.so: No such file or directory'; exit 2",
       r"NET/OFI (?:Initializing|Using) aws-ofi-nccl v?(\d+\.\d+\.\d+\S*)", "prefix",
       "the plugin names itself when NCCL loads it; older builds print 'Using' and a '-aws' suffix (a "
       "distribution tag); a pre-release tag (1.16.0-beta) is another version than the 1.16.0 release",
       "NET/OFI Initializing aws-ofi-nccl 1.16.0",
       "aws-ofi-nccl's init log line (strings of the plugin, as in aws-samples' version scripts)"),
    _c("efa_installer", "EFA installer", "cat /opt/amazon/efa_installed_packages",
       r"#\s*EFA installer version:\s*(\S+)", "exact",
       "the installer records its own release in the first line of its package list",
       "# EFA installer version: 1.41.0\n# Debug packages installed: no\n# Packages installed:\n",
       "/opt/amazon/efa_installed_packages (aws-parallelcluster-cookbook checks the same line)"),
    _c("libfabric", "fi_info (libfabric)", "fi_info --version",
       r"^libfabric:\s*(\S+)", "exact", "fi_info prints the library it loaded, with Amazon's build suffix",
       "fi_info: 2.1.0amzn3.0\nlibfabric: 2.1.0amzn3.0\nlibfabric api: 2.1",
       "`fi_info --version` (libfabric man page fi_info(1))"),
    _c("gdrcopy", "gdrdrv kernel module (gdrcopy)", "modinfo -F version gdrdrv",
       r"^\s*(\d+\.\d+)(?:\.\d+)?\s*$", "release",
       "the gdrdrv module's MODULE_VERSION is GDRDRV_VERSION_STRING = major.minor only (gdrdrv.h), "
       "so a 2.5.1 package loads a module that says 2.5",
       "2.5", "NVIDIA/gdrcopy src/gdrdrv/gdrdrv.h (GDRDRV_VERSION_STRING) and gdrdrv.c (MODULE_VERSION)"),
    _c("containerd", "containerd", "containerd --version",
       r"^containerd\s+\S+\s+v?(\d+\.\d+\.\d+\S*)", "exact",
       "containerd prints its package path, release and commit; the release is compared",
       "containerd github.com/containerd/containerd 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da",
       "`containerd --version` (containerd's version package: name, package, version, revision)"),
    _c("nvidia_container_toolkit", "nvidia-ctk (NVIDIA Container Toolkit)", "nvidia-ctk --version",
       r"NVIDIA Container Toolkit CLI version\s+v?(\d+\.\d+\.\d+)", "exact",
       "nvidia-ctk is released with the toolkit and prints its release",
       "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d",
       "`nvidia-ctk --version` as quoted in NVIDIA/nvidia-container-toolkit issue #50"),
    _c("lustre_client", "lfs (Lustre client)", "lfs --version",
       r"^lfs\s+v?(\d+\.\d+\.\d+\S*)", "prefix",
       "lfs prints the client release; FSx builds may add a build tag after it",
       "lfs 2.15.6", "`lfs --version` (Lustre utils; printed as 'lfs <version>')"),
    _c("kubelet", "kubelet", "kubelet --version",
       r"^Kubernetes\s+v?(\d+\.\d+\.\d+\S*)", "prefix",
       "EKS builds append their build tag (-eks-<hash>) to the upstream release",
       "Kubernetes v1.33.4-eks-e386d34", "`kubelet --version` (upstream prints 'Kubernetes v1.32.0')"),
    _c("slurm", "slurmd", "slurmd -V",
       r"^slurm\s+(\d+\.\d+\.\d+)", "exact", "slurmd prints the Slurm release",
       "slurm 24.11.6", "`slurmd -V` (Slurm man page slurmd(8): print version information and exit)"),
    _c("kernel", "the running kernel", "uname -r",
       r"^\s*(\d+\.\d+\.\d+\S*)\s*$", "kernel",
       "kernels are patched in place: the running kernel must be of the BOM's family (the Lustre client "
       "and the driver modules are built per family) and not older than its minimum",
       "6.1.141-155.222.amzn2023.x86_64", "`uname -r` on Amazon Linux 2023"),
)
BY_KEY: dict[str, Component] = {c.key: c for c in COMPONENTS}

# The command that says which OS the node runs (not a BOM component; it picks the BOM's OS pins).
OS_COMMAND = "cat /etc/os-release"

_MISSING = re.compile(r"command not found|No such file or directory|Module \S+ not found|not installed",
                      re.IGNORECASE)


def tool_missing(output: str, exit_code: int | None) -> bool:
    """The command could not run its tool (exit 127, `command not found`, a missing file or module).

    Why apart from "no version in the output": an absent tool means the component is not installed
    (or not on PATH); a present tool printing something else means the format changed. The operator
    needs to know which.
    """
    return exit_code == 127 or bool(_MISSING.search(output))


def read_version(key: str, output: str) -> str | None:
    comp = BY_KEY.get(key)
    if comp is None:
        return None
    m = comp.pattern.search(output)
    return next((g for g in m.groups() if g), None) if m else None


def _nums(version: str) -> list[str]:
    return re.findall(r"\d+", version)


def _parts(version: str) -> list[str]:
    """'1.16.0-beta' -> ['1', '16', '0', 'beta']; '1.16.0rc1' -> ['1', '16', '0', 'rc1']."""
    return [p for p in re.split(r"[.\-+]|(?<=\d)(?=[A-Za-z])", version.strip().lstrip("v")) if p]


# A pre-release identifier after the pinned components: alpha, beta, rc, pre, preview, dev (a
# distribution's build tag, `-aws` or `-eks-<hash>`, is not one).
PRE_RELEASE = re.compile(r"^(?:alpha|beta|rc|pre|preview|dev|a|b)\d*$", re.IGNORECASE)


_matches: dict[tuple[str, str, str], bool] = {}  # a cohort has few distinct (key, expected, found)


def matches(key: str, expected: str, found: str) -> bool:
    """Does the installed `found` satisfy the BOM's `expected` for component `key`?"""
    k = (key, expected, found)
    hit = _matches.get(k)
    if hit is None:
        hit = _compare(BY_KEY[key].compare if key in BY_KEY else "prefix", expected, found)
        if len(_matches) >= 4096:
            _matches.clear()
        _matches[k] = hit
    return hit


def _compare(kind: Compare, expected: str, found: str) -> bool:
    from gpufleet.bom import series, version_lt

    if kind == "exact":
        return found.strip().lstrip("v") == expected.strip().lstrip("v")
    if kind == "release":
        return _nums(found)[:2] == _nums(expected)[:2]
    if kind == "kernel":
        minimum = expected.removeprefix(">=").strip()
        return series(found) == series(minimum) and not version_lt(found, minimum)
    e, f = _parts(expected), _parts(found)
    if len(f) > len(e) and (f[len(e)].isdigit() or PRE_RELEASE.match(f[len(e)])):
        # 1.16.0-beta and 1.16.0rc1 come before the 1.16.0 release (SemVer 2.0.0 section 11) and
        # 1.16.0.1 after it: other versions, not the pin with a build tag
        return False
    return len(f) >= len(e) and f[:len(e)] == e


def expectation(key: str, bom: "Bom", os: str) -> str:
    """The BOM's expectation for one component as the gate compares it (kernel: '>= minimum')."""
    if key == "kernel":
        return f">= {bom.for_os(os).kernel.minimum}"
    return bom.component_versions(os)[key]


def expectations(bom: "Bom", os: str, pool: str | None = None) -> dict[str, str]:
    """Every component the BOM pins for node OS `os`, with the pool's agent only.

    pool: 'kubernetes' keeps kubelet, 'slurm' keeps slurmd, anything else (None, 'sim') keeps
    both; the gate then compares whichever agent the node runs (check_versions).
    """
    agent = POOL_AGENT.get(pool or "")
    return {k: expectation(k, bom, os) for k in bom.component_versions(os)
            if k in BY_KEY and not (agent and k in AGENT_KEYS and k != agent)}


def expectations_by_os(bom: "Bom", pool: str | None = None, only_os: str | None = None) -> dict[str, dict[str, str]]:
    oses = [only_os] if only_os else list(bom.os)
    return {os: expectations(bom, os, pool) for os in oses}


# /etc/os-release: ID and VERSION_ID name the OS the BOM's `os:` keys use
_OS_NAMES = {("amzn", "2023"): "al2023", ("ubuntu", "22.04"): "ubuntu-22.04", ("ubuntu", "24.04"): "ubuntu-24.04"}
_OS_FIELD = re.compile(r'^(ID|VERSION_ID)=["\']?([^"\'\n]*)', re.M)


def node_os(os_release: str) -> str | None:
    """'al2023', 'ubuntu-22.04', ... from /etc/os-release; other systems as '<id>-<version_id>'."""
    fields = dict(_OS_FIELD.findall(os_release))
    ident, version = fields.get("ID"), fields.get("VERSION_ID")
    if not ident:
        return None
    return _OS_NAMES.get((ident, version or ""), f"{ident}-{version}" if version else ident)


@functools.lru_cache(maxsize=1024)
def expected_text(key: str, expected: str) -> str:
    """The expectation as an operator reads it ('12.8 (release of 12.8.1)')."""
    kind = BY_KEY[key].compare if key in BY_KEY else "prefix"
    if kind == "release":
        return f"{'.'.join(_nums(expected)[:2])} (release of {expected})"
    if kind == "kernel":
        minimum = expected.removeprefix(">=").strip()
        return f"{'.'.join(_nums(minimum)[:2])}.x >= {minimum}"
    return expected


def preflight_commands() -> list[dict[str, str]]:
    """The version commands preflight.yml must run: one per component, plus the node's OS."""
    return [{"key": c.key, "cmd": c.command} for c in COMPONENTS] + [{"key": OS_KEY, "cmd": OS_COMMAND}]


def agent_for(pool: str | None) -> str | None:
    """The pool agent the BOM pins for this pool type; None when the pool names none (sim, unknown)."""
    return POOL_AGENT.get(pool or "")
