"""The destroy journal: `<state_dir>/destroy/journal.jsonl`, apart from the rollout's.

Why apart: the rollout journal is what destroy ends (it is archived by the last step), and its
fold knows nothing of destroy steps. The file machinery is the rollout's (`LocalJournalStore`:
one write(2) per line, fsync'd, a torn tail dropped), the fold is `destroy_plan.fold`. A finished
destroy's journal is archived beside it, so the next destroy of a new cluster starts empty.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import gpufleet
from gpufleet.lifecycle import destroy_plan as dp
from gpufleet.masking import mask
from gpufleet.rollout.backends import S3JournalStore
from gpufleet.rollout.journal import JournalStore, LocalJournalStore

DIR = "destroy"
FILE = "journal.jsonl"


def journal_path(state_dir: Path) -> Path:
    return state_dir / DIR / FILE


def destroy_store(rollout_store: JournalStore, state_dir: Path, stack: str,
                  warn: Callable[[str], None] = lambda _m: None) -> JournalStore:
    """Beside the stack's rollout journal: `<state_dir>/destroy/journal.jsonl`, or, for a stack whose
    journal is in S3, the same bucket under `<prefix>/destroy/<stack>/journal/`, so a destroy cut
    short on one CI runner resumes on the next (a local file would be gone with the runner)."""
    if isinstance(rollout_store, S3JournalStore):
        prefix = rollout_store.base[: -len(f"{stack}/journal/")].rstrip("/")
        return S3JournalStore(rollout_store.client, rollout_store.bucket, f"{prefix}/destroy".lstrip("/"), stack)
    return LocalJournalStore(journal_path(state_dir), warn)


class DestroyJournal:
    def __init__(self, state_dir: Path, stack: str, now: Callable[[], datetime] | None = None,
                 warn: Callable[[str], None] = lambda _m: None,
                 on_append: Callable[[dict[str, Any]], None] | None = None, store: JournalStore | None = None) -> None:
        self.store = store or LocalJournalStore(journal_path(state_dir), warn)
        self.stack = stack
        self.now = now or (lambda: datetime.now(timezone.utc))
        self.state = dp.DestroyState()
        self.on_append = on_append  # tests stop a destroy here, as a crash would

    def load(self, repair: bool = True) -> dp.DestroyState:
        self.state = dp.fold(self.store.read(repair))
        return self.state

    def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Fold first (an event that does not follow raises before it is written), then make it durable."""
        stamped = {"seq": self.state.last_seq + 1, "at": self.now().isoformat(), "stack": self.stack,
                   "version": gpufleet.__version__, "type": "destroy", **event}
        dp.apply(self.state, stamped)
        self.store.append(stamped["seq"], json.dumps(mask(stamped), separators=(",", ":")))
        if self.on_append is not None:
            self.on_append(stamped)
        return stamped

    def archive(self) -> str:
        return self.store.archive() if self.store.exists() else ""

    def close(self) -> None:
        self.store.close()
