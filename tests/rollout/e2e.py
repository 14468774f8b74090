"""Running `gpufleet rollout` in-process against a throwaway project, and reading back what it left."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from gpufleet.cli import main
from gpufleet.rollout.journal import Journal, LocalJournalStore
from gpufleet.rollout.state import RolloutState


def rollout(project: Path, stack: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--project", str(project), "rollout", "-s", stack, *args])


def journal_state(project: Path, stack: str) -> RolloutState:
    return Journal(LocalJournalStore(project / ".gpufleet" / stack / "journal.jsonl"), stack).load(repair=False)


def ledger_events(project: Path, stack: str) -> list[dict[str, Any]]:
    path = project / ".gpufleet" / stack / "sim" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


TIMES = ("decided_at", "collected_started", "collected_ended")


def snapshot(project: Path, stack: str) -> dict[str, Any]:
    """What must not depend on interruptions: the pool, the admission records, the cloud's ledger.

    Timestamps are left out: a resumed rollout re-asks the provider for instances that booted while
    it was dead, which takes no modelled time, so its clock (and every record's time, and the
    digest the pool keeps of the record) runs a little differently. The digest is checked against
    the record instead."""
    from gpufleet.gates.admission import AdmissionRecord
    from gpufleet.pool.protocol import record_digest

    sd = project / ".gpufleet" / stack
    pool = json.loads((sd / "pool.json").read_text())
    records = {p.stem: json.loads(p.read_text()) for p in sorted((sd / "records").glob("*.json"))}
    for slot, node in pool["nodes"].items():
        digest = node.pop("record_digest", None)
        if node["state"] == "admitted":
            assert digest == record_digest(AdmissionRecord.model_validate(records[slot])), slot
    for r in records.values():
        for key in TIMES:
            r.pop(key, None)
    ledger = [{k: v for k, v in e.items() if k != "seq"} for e in ledger_events(project, stack)]
    return {"pool": pool, "records": records, "ledger": ledger}
