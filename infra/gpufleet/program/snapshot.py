"""Deterministic snapshots of each stack's registered resource graph (tests/infra/snapshots/).

A snapshot keeps, per registration, its type, name, parent type and the inputs that decide
what gets built (mock ids are stable digests, so they are kept too). Updating is explicit:
`python -m gpufleet.program.snapshot --update [STACK...]`; tests only compare.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpufleet.program.capture import Capture, capture_program
from gpufleet.spec import available_stacks

SNAPSHOT_DIR = Path(__file__).resolve().parents[3] / "tests" / "infra" / "snapshots"  # this repository's test data
ALL_BATCHES = 100_000  # every batch: the largest targetBatch a stack may set (spec bound)
VOLATILE_INPUTS = {"userData"}  # kept as a digest: long, and covered by the user-data tests


def snapshot_of(capture: Capture) -> dict[str, Any]:
    import hashlib

    rows = []
    for r in capture.registrations:
        inputs = {k: (hashlib.sha256(str(v).encode()).hexdigest()[:16] if k in VOLATILE_INPUTS else v)
                  for k, v in sorted(r.inputs.items())}
        parent = r.parent.rsplit("::", 2)[-2].split("$")[-1] if r.parent and "::" in r.parent else None
        rows.append({"type": r.type, "name": r.name, "parent": parent, "inputs": inputs,
                     "protect": r.options.get("protect", False), "ignoreChanges": r.options.get("ignoreChanges", [])})
    rows.sort(key=lambda x: (x["type"], x["name"]))
    return {"stack": capture.stack, "resources": rows}


def snapshot_path(stack: str, directory: Path = SNAPSHOT_DIR) -> Path:
    return directory / f"{stack}.json"


def render(snapshot: dict[str, Any]) -> str:
    return json.dumps(snapshot, indent=1, sort_keys=True) + "\n"


def capture_for_snapshot(stack: str) -> Capture:
    """Every batch deployed (target past the last batch), recorded count 0: the full graph."""
    return capture_program(stack, target_batch=ALL_BATCHES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the snapshot files")
    parser.add_argument("stacks", nargs="*", help="stacks (default: all)")
    args = parser.parse_args(argv)
    if not args.update:
        parser.error("pass --update to rewrite snapshots (tests compare against them)")
    for stack in args.stacks or available_stacks():
        path = snapshot_path(stack)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(snapshot_of(capture_for_snapshot(stack))))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
