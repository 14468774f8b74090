"""Stub tools inside a test host's root: small shell scripts that print what the real tool prints.

A host of netns_lab.py with a root of its own runs its sessions chrooted there, so a stub in
`<root>/usr/local/bin` is that host's tool and no other's (the preflight's PATH puts
/usr/local/bin before /usr/bin).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping

STUB_DATA = "srv/gpufleet-stubs"  # outputs the stubs print, inside the root


def install_tool(root: Path, path: str, script: str) -> Path:
    """Write an executable `/bin/sh` script at `path` (absolute, inside `root`)."""
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("#!/bin/sh\n" + script.strip() + "\n")
    target.chmod(0o755)
    return target


def install_outputs(root: Path, outputs: Mapping[str, str]) -> Path:
    """Files the stubs `cat` (name -> content), under <root>/STUB_DATA."""
    data = root / STUB_DATA
    data.mkdir(parents=True, exist_ok=True)
    for name, text in outputs.items():
        (data / name).write_text(text)
    return data


def dispatch(cases: Mapping[str, str], unknown_rc: int = 2) -> str:
    """A `case "$*"` over argument patterns, each printing one STUB_DATA file (or running a snippet
    given as `!<shell>`); other arguments are refused like an unknown option."""
    lines = ['case "$*" in']
    for pattern, action in cases.items():
        body = action[1:] if action.startswith("!") else f"cat /{STUB_DATA}/{shlex.quote(action)}"
        lines.append(f"  {pattern}) {body} ;;")
    lines.append(f'  *) echo "stub: unsupported arguments: $*" >&2; exit {unknown_rc} ;;')
    lines.append("esac")
    return "\n".join(lines)
