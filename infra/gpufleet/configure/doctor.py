"""What a reviewer checks on the first real node of a new AMI or BOM, before the first rollout.

Why: the offline tests cannot see a real node (node-config-review section 4: stubs, no kernel, no
systemd, no loader); these read-only checks read the node itself. `playbooks/doctor.yml` collects
each command's output and exit code into doctor.json; `findings` compares them with the BOM and
the rules the roles follow, as a pure function; `gpufleet doctor` prints what differs, exit 4.

Each check names where its rule comes from:
- versions: every BOM component as the preflight reads it (gpufleet.gates.versions);
- loader: the aws-ofi-nccl plugin is in the loader cache (node-config-review F4: else NCCL falls
  back to sockets silently);
- kernel hold: the running kernel's packages are held/locked (F12);
- fstab units: every unit a Lustre fstab entry requires exists (F11: network.service did not);
- memlock: unlimited in limits.d and for slurmd on Slurm nodes (M7);
- containerd: the merged configuration (`containerd config dump`) keeps runc on the systemd cgroup
  driver (M4: a drop-in's CRI table replaced config.toml's in containerd 1.7);
- reachability: a TCP connect from the node to each service it must reach before a rollout (the
  EKS endpoint, slurmctld, the FSx file system), from the stack's outputs (gpufleet.configure.reachability).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from gpufleet.configure import reachability
from gpufleet.gates import versions

if TYPE_CHECKING:
    from gpufleet.bom import Bom

DOCTOR_FILE = "doctor.json"

# the read-only commands besides the version commands (each: output and exit code recorded)
CHECK_COMMANDS: dict[str, str] = {
    "kernel": "uname -r",
    "loader": "ldconfig -p | grep -E 'libnccl-net(-ofi)?[.]so' || true",
    "holds_apt": "command -v apt-mark >/dev/null && apt-mark showhold || true",
    "holds_dnf": "command -v dnf >/dev/null && dnf -q versionlock list 2>/dev/null || true",
    "fstab_units": (
        "findmnt --fstab -t lustre -n -o OPTIONS | tr ',' '\\n' | sed -n 's/^x-systemd[.]requires=//p' | "
        "while read -r u; do if systemctl cat \"$u\" >/dev/null 2>&1; then echo \"$u: found\"; "
        "else echo \"$u: not found\"; fi; done"),
    "limits_memlock": "grep -hE '^[^#]*memlock' /etc/security/limits.d/*.conf 2>/dev/null || true",
    "slurmd_memlock": "systemctl show slurmd -p LimitMEMLOCK --value 2>/dev/null || true",
    "containerd_config": "containerd config dump",
}


@dataclass(frozen=True)
class Difference:
    """One thing on the node that is not what the BOM and the roles say it should be."""

    check: str
    expected: str
    found: str
    source: str


def _out(collected: Mapping[str, Any], key: str) -> str:
    entry = collected.get(key) or {}
    return str(entry.get("output") or "")


def version_differences(collected: Mapping[str, Any], bom: "Bom", os: str, pool: str | None) -> list[Difference]:
    """Installed versions against the BOM, read and compared as the preflight's version gate does."""
    out: list[Difference] = []
    for key, expected in versions.expectations(bom, os, pool).items():
        entry = collected.get(key) or {}
        output, code = str(entry.get("output") or ""), entry.get("exit_code")
        if versions.tool_missing(output, code):
            out.append(Difference(f"version.{key}", versions.expected_text(key, expected), "tool missing: "
                                  + (output.strip().splitlines() or ["no output"])[-1], "images/bom.yaml"))
            continue
        found = versions.read_version(key, output)
        if found is None or not versions.matches(key, expected, found):
            out.append(Difference(f"version.{key}", versions.expected_text(key, expected),
                                  found or "unreadable: " + output.strip()[:120], "images/bom.yaml"))
    return out


def loader_differences(collected: Mapping[str, Any]) -> list[Difference]:
    lines = [x for x in _out(collected, "loader").splitlines() if "libnccl-net" in x]
    if lines:
        return []
    return [Difference("loader.aws_ofi_nccl", "libnccl-net(-ofi).so in the loader cache (ldconfig -p)",
                       "not in the loader cache", "node-config-review F4; efa role's ld.so.conf.d file")]


def kernel_hold_differences(collected: Mapping[str, Any], family: str) -> list[Difference]:
    kernel = _out(collected, "kernel").strip()
    if family == "Debian":
        held = set(_out(collected, "holds_apt").split())
        want = f"linux-image-{kernel}"
        if want in held:
            return []
        return [Difference("kernel.hold", f"{want} held (apt-mark showhold)", ", ".join(sorted(held)) or "nothing held",
                           "node-config-review F12; aws/aws-parallelcluster#7064")]
    build = re.sub(r"[.](x86_64|aarch64)$", "", kernel)
    locks = _out(collected, "holds_dnf").split()
    if any(re.fullmatch(rf"kernel-(\d+:)?{re.escape(build)}(\.\*)?", lock) for lock in locks):
        return []
    return [Difference("kernel.hold", f"kernel-{build} versionlocked (dnf versionlock list)",
                       ", ".join(x for x in locks if x.startswith("kernel")) or "no kernel lock",
                       "node-config-review F12; amazon-eks-ami dnf versionlock kernel*")]


def fstab_differences(collected: Mapping[str, Any]) -> list[Difference]:
    missing = [x.split(":")[0] for x in _out(collected, "fstab_units").splitlines() if x.endswith(": not found")]
    return [Difference("fstab.requires", f"{unit} exists (x-systemd.requires= of a Lustre fstab entry)", "no such unit",
                       "node-config-review F11; systemd.mount(5)") for unit in missing]


def memlock_differences(collected: Mapping[str, Any], pool: str | None) -> list[Difference]:
    out: list[Difference] = []
    limits = [x.split() for x in _out(collected, "limits_memlock").splitlines()]
    if not any(len(f) >= 4 and f[2] == "memlock" and f[3] == "unlimited" for f in limits):
        out.append(Difference("memlock.pam", "memlock unlimited in /etc/security/limits.d", "not set",
                              "efa role; AWS EFA user guide"))
    if pool == "slurm":
        value = _out(collected, "slurmd_memlock").strip()
        if value != "infinity":
            out.append(Difference("memlock.slurmd", "slurmd LimitMEMLOCK=infinity", value or "unset",
                                  "node-config-review M7; slurm.conf(5) PropagateResourceLimitsExcept"))
    return out


def containerd_differences(collected: Mapping[str, Any]) -> list[Difference]:
    entry = collected.get("containerd_config") or {}
    if entry.get("exit_code") != 0:
        return []  # no containerd: the version check already says so
    try:
        config = tomllib.loads(str(entry.get("output") or ""))
    except tomllib.TOMLDecodeError as exc:
        return [Difference("containerd.runc_cgroup", "a readable `containerd config dump`", f"unreadable: {exc}",
                           "node-config-review M4")]
    runc = (config.get("plugins", {}).get("io.containerd.grpc.v1.cri", {}).get("containerd", {})
            .get("runtimes", {}).get("runc", {}).get("options", {}))
    if runc.get("SystemdCgroup") is True:
        return []
    return [Difference("containerd.runc_cgroup", "runc SystemdCgroup = true in containerd's merged config",
                       f"SystemdCgroup = {runc.get('SystemdCgroup', 'unset')}",
                       "node-config-review M4; containerd 1.7 mergeConfig")]


def reach_differences(collected: Mapping[str, Any], targets: Sequence[reachability.Target]) -> list[Difference]:
    """Each service the node could not connect to, with the probe's reason code."""
    return [Difference(f"reach.{u.target.name}", f"TCP to {u.target.host}:{u.target.port} ({u.target.what})",
                       f"{u.code}: {u.detail}", u.target.source)
            for u in reachability.unreachable(list(targets), collected)]


def findings(collected: Mapping[str, Any], bom: "Bom", pool: str | None,
             reach: Sequence[reachability.Target] = ()) -> list[Difference]:
    """Every difference between the node (doctor.json) and what the BOM and the roles say; `reach`:
    the services the node must connect to (their probes ran with `doctor_commands(pool, reach)`)."""
    os = versions.node_os(_out(collected, "os_release"))
    if os is None:  # the node-side checks need the OS; reachability does not
        return [Difference("os", "an OS the BOM pins (/etc/os-release)", _out(collected, "os_release")[:80] or "unread",
                           "images/bom.yaml")] + reach_differences(collected, reach)
    if os not in bom.os:
        return [Difference("os", f"one of the BOM's systems ({', '.join(sorted(bom.os))})", os,
                           "images/bom.yaml")] + reach_differences(collected, reach)
    family = "RedHat" if os.startswith("al") else "Debian"
    return (version_differences(collected, bom, os, pool) + loader_differences(collected)
            + kernel_hold_differences(collected, family) + fstab_differences(collected)
            + memlock_differences(collected, pool) + containerd_differences(collected)
            + reach_differences(collected, reach))


def doctor_commands(pool: str | None, reach: Sequence[reachability.Target] = ()) -> list[dict[str, str]]:
    """The doctor playbook's command list: the preflight's version commands, the checks', then one
    TCP probe per service the node must reach."""
    skipped = {"kubernetes": {"slurm"}, "slurm": {"kubelet"}}.get(pool or "", set())
    cmds = [c for c in versions.preflight_commands() if c["key"] not in skipped]
    return (cmds + [{"key": k, "cmd": v} for k, v in CHECK_COMMANDS.items()]
            + [{"key": t.key, "cmd": reachability.probe_command(t)} for t in reach])
