"""Small system probes: systemctl is-active, the Lustre probe, `nvidia-smi -L` in a container,
and versions.json (raw output of each version command, read with its component's pattern).

Why raw stdout in versions.json: the collector decides nothing, so version extraction (and its
failure) happens here, where it is tested.
"""

from __future__ import annotations

import json
import re

from gpufleet.gates import versions
from gpufleet.gates.parsers.common import ParseModel, shared_by_text


# what `systemctl is-active` prints (systemctl(1)); anything else is an error message, not a state
SYSTEMCTL_STATES = frozenset({"active", "inactive", "failed", "activating", "deactivating", "reloading",
                              "refreshing", "maintenance", "unknown"})


def parse_systemctl_is_active(text: str) -> str | None:
    """'active', 'inactive', 'failed', 'activating', ... (the first word), or None when empty."""
    for line in text.splitlines():
        if line.strip():
            return line.strip().split()[0]
    return None


class LustreCheck(ParseModel):
    mount: str | None = None  # "<target> <source>" from findmnt, None when nothing is mounted
    writable: bool | None = None
    problems: tuple[str, ...] = ()


def parse_lustre_check(text: str) -> LustreCheck:
    """Two lines written by preflight.yml: `mount: <target> <source>` and `writable: yes|no`."""
    mount = writable = None
    seen_mount = seen_writable = False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "mount":
            seen_mount, mount = True, (value or None)
        elif key == "writable":
            seen_writable = True
            writable = {"yes": True, "no": False}.get(value.lower())
    problems = [f"no '{k}:' line" for k, seen in (("mount", seen_mount), ("writable", seen_writable)) if not seen]
    return LustreCheck(mount=mount, writable=writable, problems=tuple(problems))


_SMI_L = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)")


class GpuList(ParseModel):
    gpus: tuple[tuple[int, str], ...] = ()
    uuids: tuple[str, ...] = ()


def parse_nvidia_smi_l(text: str) -> GpuList:
    gpus, uuids = [], []
    for line in text.splitlines():
        m = _SMI_L.match(line.strip())
        if m:
            gpus.append((int(m.group(1)), m.group(2)))
            uuids.append(m.group(3))
    return GpuList(gpus=tuple(gpus), uuids=tuple(uuids))


class Versions(ParseModel):
    versions: dict[str, str] = {}  # key -> the version as the tool printed it
    missing: dict[str, str] = {}  # key -> why the tool is absent ("nvcc: command not found")
    node_os: str | None = None  # 'al2023', 'ubuntu-22.04', ... from /etc/os-release
    problems: tuple[str, ...] = ()


@shared_by_text
def parse_versions(text: str) -> Versions:
    """versions.json: key -> raw output, or key -> {"output": raw, "exit_code": rc} (preflight.yml).

    Each key's version is read with its component's pattern (gpufleet.gates.versions); an absent
    tool is recorded as missing, an output without a version as a problem.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return Versions(problems=(f"invalid JSON: {exc}",))
    if not isinstance(raw, dict):
        return Versions(problems=("versions.json is not an object",))
    found: dict[str, str] = {}
    missing: dict[str, str] = {}
    problems: list[str] = []
    os_name = None
    for key, value in raw.items():
        rc = None
        if isinstance(value, dict):
            rc = value.get("exit_code") if isinstance(value.get("exit_code"), int) else None
            value = value.get("output")
        out = "" if value is None else str(value)
        if key == versions.OS_KEY:
            os_name = versions.node_os(out)
            continue
        if key not in versions.BY_KEY:
            problems.append(f"{key}: no known version pattern")
            continue
        v = versions.read_version(key, out)
        if v is not None:
            found[key] = v
        elif versions.tool_missing(out, rc):
            first = next((ln.strip() for ln in out.splitlines() if ln.strip()), f"exit {rc}")
            missing[key] = first[:120]
        else:
            problems.append(f"{key}: no version in {out.strip()[:80]!r}")
    return Versions(versions=found, missing=missing, node_os=os_name, problems=tuple(problems))
