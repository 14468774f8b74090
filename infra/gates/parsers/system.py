"""Small system probes: systemctl is-active, the Lustre probe, `nvidia-smi -L` in a container,
and versions.json (raw stdout of each version command, read with one regex per key).

Why raw stdout in versions.json: the collector decides nothing, so version extraction (and its
failure) happens here, where it is tested.
"""

from __future__ import annotations

import json
import re

from infra.gates.parsers.common import ParseModel


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


# key -> regex capturing the version in the raw stdout of that key's command (see BUNDLE.md)
VERSION_PATTERNS: dict[str, re.Pattern[str]] = {
    "nvidia_driver": re.compile(r"(?:Kernel Module(?: for \w+)?\s+|^)(\d{3}\.\d+(?:\.\d+)?)\b", re.M),
    "fabric_manager": re.compile(r"Fabric Manager version is\s*:?\s*(\d+\.\d+(?:\.\d+)?)"),
    "cuda": re.compile(r"(?:release \d+\.\d+, V(\d+\.\d+\.\d+)|\"version\"\s*:\s*\"(\d+\.\d+\.\d+)\"|^(\d+\.\d+(?:\.\d+)?)$)",
                       re.M),
    "dcgm": re.compile(r"[Vv]ersion\s*:?\s*(\d+\.\d+\.\d+)"),
    "nccl": re.compile(r"(?:libnccl\.so\.|NCCL version |^)(\d+\.\d+\.\d+)", re.M),
    "aws_ofi_nccl": re.compile(r"(?:aws-ofi-nccl |^)v?(\d+\.\d+\.\d+(?:-aws)?)", re.M),
    "efa_installer": re.compile(r"EFA installer version:\s*(\S+)"),
    "libfabric": re.compile(r"libfabric:\s*(\S+)"),
    "kernel": re.compile(r"^\s*(\d+\.\d+\.\d+\S*)\s*$", re.M),
}


class Versions(ParseModel):
    versions: dict[str, str] = {}
    problems: tuple[str, ...] = ()


def parse_versions(text: str) -> Versions:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return Versions(problems=(f"invalid JSON: {exc}",))
    if not isinstance(raw, dict):
        return Versions(problems=("versions.json is not an object",))
    found: dict[str, str] = {}
    problems: list[str] = []
    for key, out in raw.items():
        out = "" if out is None else str(out)
        pat = VERSION_PATTERNS.get(key)
        if pat is None:
            problems.append(f"{key}: no known version pattern")
            continue
        m = pat.search(out)
        if m:
            found[key] = next(g for g in m.groups() if g)
        else:
            problems.append(f"{key}: no version in {out.strip()[:80]!r}")
    return Versions(versions=found, problems=tuple(problems))


_matches: dict[tuple[str, str], bool] = {}  # (expected, measured) -> answer; a cohort has few distinct pairs


def version_matches(expected: str, measured: str) -> bool:
    """Expected '12.4' matches measured '12.4.131'; '535.183.01' must match exactly component-wise (see _version_matches)."""
    try:
        return _matches[(expected, measured)]
    except KeyError:
        pass
    except TypeError:
        return _version_matches(expected, measured)
    ok = _version_matches(expected, measured)
    if len(_matches) >= 4096:
        _matches.clear()
    _matches[(expected, measured)] = ok
    return ok


def _version_matches(expected: str, measured: str) -> bool:
    """Expected '12.4' matches measured '12.4.131'; '535.183.01' must match exactly component-wise.

    Why prefix-by-component: a BOM may pin a CUDA minor while tools print the full build; a
    different component anywhere in the expected part is a mismatch.
    """
    e = re.split(r"[.\-+]", expected.strip().lstrip("v"))
    m = re.split(r"[.\-+]", measured.strip().lstrip("v"))
    return len(m) >= len(e) and m[:len(e)] == e
