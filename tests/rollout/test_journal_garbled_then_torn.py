"""A garbled complete line followed by a torn tail is damage, not a crash: an error, never dropped.

A crash tears at most the last write. A line that ends in its newline yet does not parse, with more
bytes after it, was damaged some other way; dropping it with the torn tail would silently forget an
event that had counted as done (and, with repair, cut it from the disk).
"""

from __future__ import annotations

import json

import pytest

from gpufleet.rollout.journal import Journal, JournalError, LocalJournalStore

START = {"type": "rollout", "to": "started", "batches": [1], "seq": 1}
RUN = {"type": "batch", "batch": 1, "to": "running", "seq": 2}


@pytest.mark.parametrize("garbled", [b"not json", b'{"seq": 3, "type"\x00\x00', b"[1, 2]"])
@pytest.mark.parametrize("repair", [True, False])
def test_a_garbled_line_before_a_torn_tail_is_an_error_naming_it(tmp_path, garbled: bytes, repair: bool) -> None:
    path = tmp_path / "journal.jsonl"
    data = json.dumps(START).encode() + b"\n" + json.dumps(RUN).encode() + b"\n" + garbled + b'\n{"seq": 4, "ty'
    path.write_bytes(data)
    warnings: list[str] = []
    with pytest.raises(JournalError, match="line 3 is not a journal event"):
        Journal(LocalJournalStore(path, warn=warnings.append), "t").load(repair=repair)
    assert path.read_bytes() == data  # nothing cut off
    assert warnings == []


def test_a_garbled_last_line_alone_is_still_the_torn_tail(tmp_path) -> None:
    path = tmp_path / "journal.jsonl"
    good = json.dumps(START).encode() + b"\n" + json.dumps(RUN).encode() + b"\n"
    path.write_bytes(good + b"not json\n")
    warnings: list[str] = []
    state = Journal(LocalJournalStore(path, warn=warnings.append), "t").load()
    assert state.last_seq == 2 and len(warnings) == 1 and path.read_bytes() == good
