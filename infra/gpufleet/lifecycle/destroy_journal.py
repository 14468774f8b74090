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
from gpufleet.rollout.journal import LocalJournalStore

DIR = "destroy"
FILE = "journal.jsonl"


def journal_path(state_dir: Path) -> Path:
    return state_dir / DIR / FILE


class DestroyJournal:
    def __init__(self, state_dir: Path, stack: str, now: Callable[[], datetime] | None = None,
                 warn: Callable[[str], None] = lambda _m: None,
                 on_append: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.store = LocalJournalStore(journal_path(state_dir), warn)
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
