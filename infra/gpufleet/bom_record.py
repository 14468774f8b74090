"""Every BOM a rollout or an upgrade applied, kept by its digest under the stack's state.

Why: a rollback reinstalls the BOM the pool ran before, and the admission records name it only by
digest. The user's `images/bom.yaml` moves on (edited, committed, rebased); the copy kept here is
the exact text that was applied, so `gpufleet upgrade` finds the previous BOM by itself from the
digest in the admitted nodes' records. Content-addressed: a kept file never changes (a second
keep of the same digest writes nothing), and reading one checks that its text still hashes to
its name, so a damaged copy is refused by name before any node is drained.

Each keep is also listed in `applied.jsonl` beside the copies (digest, image, who, when), the
history `gpufleet upgrade` and a person read; the copies alone are what a rollback needs.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from gpufleet.bom import Bom, load_bom
from gpufleet.durable import fsync_dir, write_atomic
from gpufleet.errors import ConfigError

RECORD_DIR = Path("upgrade") / "boms"  # under the stack's state dir (the upgrade's journals point here)
HISTORY = "applied.jsonl"


def record_path(state_dir: Path, digest: str) -> Path:
    """Where the BOM with `digest` (sha256:...) is kept."""
    hexpart = digest.removeprefix("sha256:")
    if len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise ConfigError(f"not a BOM digest: {digest!r}", field="bom_digest", expected="sha256: and 64 hex digits")
    return Path(state_dir) / RECORD_DIR / f"{hexpart}.yaml"


def keep(state_dir: Path, bom_path: Path, *, applied_by: str, image: str | None = None) -> tuple[Bom, Path]:
    """Keep the BOM at `bom_path` under its digest (once) and list this use of it; returns the BOM
    and the kept file. The text kept is the text read and digested here, never a second read."""
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
    _append_history(dest.parent / HISTORY, {"digest": bom.digest(), "image": image, "applied_by": applied_by,
                                            "source": str(bom_path),
                                            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    return bom, dest


def find(state_dir: Path, digest: str) -> Path | None:
    """The kept copy of the BOM with `digest`, None when none was kept. A copy whose text no longer
    hashes to its name (edited, truncated) is an error naming the file, not a miss."""
    path = record_path(state_dir, digest)
    if not path.exists():
        return None
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
