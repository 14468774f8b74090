"""`<state_dir>/destroyed.json`: the stack's cluster was destroyed, and when.

Why a marker beside the archived rollout journal: without a journal, `gpufleet pool` would show an
empty pool of a cluster that may never have existed; with the marker it says the cluster is gone
and how to make a new one. The next `rollout` (a fresh journal) moves the marker into the destroy
history (`destroy/`), so the new cluster is shown as usual.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from gpufleet.durable import fsync_dir, write_atomic

MARKER = "destroyed.json"
ROLLOUT_JOURNAL = "journal.jsonl"


def mark(state_dir: Path, record: Mapping[str, Any]) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / MARKER
    write_atomic(path, json.dumps(dict(record), indent=2, sort_keys=True) + "\n")
    return path


def destroyed(state_dir: Path) -> dict[str, Any] | None:
    """The marker's record while no new rollout journal exists; None otherwise (or when unreadable)."""
    path = state_dir / MARKER
    if not path.is_file() or (state_dir / ROLLOUT_JOURNAL).exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def no_cluster_text(stack: str, record: Mapping[str, Any]) -> str:
    return (f"stack {stack} has no cluster: destroyed at {record.get('at', '?')} by `gpufleet destroy`; "
            f"`gpufleet rollout -s {stack}` creates a new one")


def retire(state_dir: Path) -> Path | None:
    """A new cluster starts: the marker moves into the destroy history; returns where it went."""
    path = state_dir / MARKER
    if not path.is_file():
        return None
    history = state_dir / "destroy"
    history.mkdir(parents=True, exist_ok=True)
    try:
        at = str(json.loads(path.read_text(encoding="utf-8")).get("at", ""))
    except (OSError, ValueError, AttributeError):
        at = ""
    stamp = "".join(ch for ch in at if ch.isalnum()) or "unknown"
    target = history / f"destroyed.{stamp}.json"
    os.replace(path, target)
    fsync_dir(state_dir)
    return target
