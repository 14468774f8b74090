"""Slurm's hostlist notation, both ways: `gpu-[01-03,07]` <-> gpu-01 gpu-02 gpu-03 gpu-07.

Shared by slurm.conf generation and `scontrol` updates (compressing: one argument for 1,250 nodes)
and by everything that reads Slurm's answers (squeue, sacct: expanding).
"""

from __future__ import annotations

import re
from typing import Sequence


def hostlist(names: Sequence[str]) -> str:
    """Slurm's compressed form: runs of one prefix with consecutive zero-padded numbers."""
    out: list[str] = []
    run: list[tuple[str, str]] = []

    def flush() -> None:
        if not run:
            return
        prefix, first = run[0]
        last = run[-1][1]
        out.append(f"{prefix}{first}" if len(run) == 1 else f"{prefix}[{first}-{last}]")
        run.clear()

    for name in names:
        m = re.match(r"^(.*?)(\d+)$", name)
        if not m:
            flush()
            out.append(name)
            continue
        prefix, digits = m.groups()
        if run and run[0][0] == prefix and len(run[-1][1]) == len(digits) and int(run[-1][1]) + 1 == int(digits):
            run.append((prefix, digits))
        else:
            flush()
            run.append((prefix, digits))
    flush()
    return ",".join(out)


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Slurm's hostlist, e.g. `gpu-[01-03,07],cpu5` -> gpu-01 gpu-02 gpu-03 gpu-07 cpu5 (zero padding kept)."""
    text = text.strip()
    if not text or text in ("None assigned", "(null)"):
        return ()
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    parts.append(cur)
    out: list[str] = []
    for part in filter(None, parts):
        m = re.fullmatch(r"(.*?)\[([^\]]+)\](.*)", part)
        if not m:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            lo, _, hi = rng.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"bad hostlist range {rng!r} in {text!r}")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                out.extend(f"{prefix}{n:0{width}d}{s}" for s in expand_hostlist(suffix) or ("",))
    return tuple(out)
