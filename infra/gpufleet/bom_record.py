"""Every BOM a rollout or an upgrade applied, kept by its digest under the stack's state.

Why: a rollback reinstalls the BOM the pool ran before, and the admission records name it only by
digest. The user's `images/bom.yaml` moves on (edited, committed, rebased); the copy kept here is
the exact text that was applied, so `gpufleet upgrade` finds the previous BOM by itself from the
digest in the admitted nodes' records. Content-addressed: a kept file never changes (a second
keep of the same digest writes nothing), and reading one checks that its text still hashes to
its name, so a damaged copy is refused by name before any node is drained.

Each keep is also listed in `applied.jsonl` beside the copies (digest, image, who, when), the
history `gpufleet upgrade` and a person read; the copies alone are what a rollback needs.

A stack whose state lives in S3 (CI: every run on a fresh runner) keeps each copy there too
(`Remote`, `gpufleet.rollout.backends.S3BomStore`), and `find` fetches a copy the local state
lacks from there, checked against its digest like a local one.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from gpufleet.bom import Bom, load_bom
from gpufleet.durable import fsync_dir, write_atomic
from gpufleet.errors import ConfigError

RECORD_DIR = Path("upgrade") / "boms"  # under the stack's state dir (the upgrade's journals point here)
HISTORY = "applied.jsonl"


class Remote(Protocol):
    """Where a stack's kept BOMs are kept beside its local state (the S3 state backend)."""

    def put(self, digest: str, text: str) -> None:
        ...

    def get(self, digest: str) -> str | None:
        ...

    def location(self, digest: str) -> str:
        ...


def record_path(state_dir: Path, digest: str) -> Path:
    """Where the BOM with `digest` (sha256:...) is kept."""
    hexpart = digest.removeprefix("sha256:")
    if len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise ConfigError(f"not a BOM digest: {digest!r}", field="bom_digest", expected="sha256: and 64 hex digits")
    return Path(state_dir) / RECORD_DIR / f"{hexpart}.yaml"


def keep(state_dir: Path, bom_path: Path, *, applied_by: str, image: str | None = None,
         remote: Remote | None = None) -> tuple[Bom, Path]:
    """Keep the BOM at `bom_path` under its digest (once, and in `remote` too) and list this use of
    it; returns the BOM and the kept file. The text kept is the text read and digested here, never a
    second read."""
    bom_path = Path(bom_path)
    try:
        text = bom_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the BOM to keep it: {exc}", path=str(bom_path)) from None
    bom = load_bom(bom_path)
    dest = record_path(state_dir, bom.digest())
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists() or _kept_digest(dest) != bom.digest():
        write_atomic(dest, text)
        if load_bom(dest).digest() != bom.digest():  # the file changed between the two reads
            dest.unlink()
            raise ConfigError("the BOM changed while it was being kept; run again", path=str(bom_path))
    if remote is not None:
        remote.put(bom.digest(), text)
    _append_history(dest.parent / HISTORY, {"digest": bom.digest(), "image": image, "applied_by": applied_by,
                                            "source": str(bom_path),
                                            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    return bom, dest


def find(state_dir: Path, digest: str, remote: Remote | None = None) -> Path | None:
    """The kept copy of the BOM with `digest`, None when none was kept (here or in `remote`, whose
    copy is fetched into the local state). A copy whose text no longer hashes to its name (edited,
    truncated) is an error naming the file or object, not a miss."""
    path = record_path(state_dir, digest)
    if not path.exists():
        text = remote.get(digest) if remote is not None else None
        if remote is None or text is None:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
        got = _kept_digest(path)
        if got != digest:
            path.unlink()
            raise ConfigError(f"the kept BOM does not match its digest (its text hashes to {got[:19]}); it was changed "
                              "after it was kept, so a rollback cannot trust it", path=remote.location(digest),
                              expected=f"the BOM with digest {digest[:19]}; restore it with --previous-bom")
    got = _kept_digest(path)
    if got != digest:
        raise ConfigError(f"the kept BOM does not match its digest (its text hashes to {got[:19]}); it was changed "
                          "after it was kept, so a rollback cannot trust it", path=str(path),
                          expected=f"the BOM with digest {digest[:19]}; restore it with --previous-bom")
    return path


def history(state_dir: Path) -> list[dict[str, object]]:
    """Every keep, oldest first (a line cut short by a crash is skipped)."""
    path = Path(state_dir) / RECORD_DIR / HISTORY
    if not path.exists():
        return []
    out: list[dict[str, object]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _kept_digest(path: Path) -> str:
    try:
        return load_bom(path).digest()
    except ConfigError:
        return "sha256:unreadable"


def _append_history(path: Path, entry: dict[str, object]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(path.parent)
