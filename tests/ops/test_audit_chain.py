"""The audit log's hash chain: an edit, a deletion, an insertion and a garbage line are each named
at the first record they break; with the stack's key, a rewritten chain does not verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.ops import audit

KEY_ENV: dict[str, str] = {}


def _log(tmp_path: Path, n: int = 6, key: bytes | None = None) -> list[str]:
    for i in range(n):
        audit.append(tmp_path, audit.entry(stack="s", who="operator", what="pool blacklist", why=f"reason {i}",
                                           target=f"gpu-{i:03d}", env=KEY_ENV), key=key)
    return (tmp_path / audit.FILE).read_text().splitlines()


def _verify(lines: list[str], key: bytes | None = None) -> audit.Verdict:
    return audit.verify_lines([line.encode() for line in lines], key)


def test_an_untouched_log_verifies_and_is_created_private(tmp_path: Path) -> None:
    lines = _log(tmp_path)
    v = audit.verify(tmp_path)
    assert v.ok and v.records == 6 and not v.signed
    assert json.loads(lines[0])["prev"] == audit.GENESIS
    assert all(json.loads(b)["prev"] == json.loads(a)["hash"] for a, b in zip(lines, lines[1:]))
    assert (tmp_path / audit.FILE).stat().st_mode & 0o777 == 0o600


def test_an_edited_who_is_named_at_its_record(tmp_path: Path) -> None:
    lines = _log(tmp_path)
    lines[2] = lines[2].replace('"who": "operator"', '"who": "someone-else"')
    v = _verify(lines)
    assert (v.broken_at, v.records) == (3, 2) and "edited" in v.why


def test_an_edit_with_its_hash_recomputed_breaks_the_next_link(tmp_path: Path) -> None:
    lines = _log(tmp_path)
    rec = json.loads(lines[2]) | {"who": "someone-else"}
    rec["hash"] = audit.seal(rec, None)
    lines[2] = json.dumps(rec, sort_keys=True)
    v = _verify(lines)
    assert v.broken_at == 4 and "deleted or inserted" in v.why


def test_a_deleted_record_is_named_at_the_record_after_it(tmp_path: Path) -> None:
    lines = _log(tmp_path)
    del lines[3]
    v = _verify(lines)
    assert v.broken_at == 4 and "deleted or inserted" in v.why


def test_an_inserted_record_chained_to_its_predecessor_breaks_the_one_after(tmp_path: Path) -> None:
    lines = _log(tmp_path)
    forged = audit.entry(stack="s", who="operator", what="pool clear", why="forged", env=KEY_ENV)
    forged["prev"] = json.loads(lines[1])["hash"]
    forged["hash"] = audit.seal(forged, None)
    lines.insert(2, json.dumps(forged, sort_keys=True))
    v = _verify(lines)
    assert v.broken_at == 4 and "deleted or inserted" in v.why


def test_a_garbage_line_is_named(tmp_path: Path) -> None:
    lines = _log(tmp_path)
    lines.insert(1, "not a record")
    assert _verify(lines).broken_at == 2


def test_with_the_key_a_rewritten_chain_does_not_verify(tmp_path: Path) -> None:
    key = b"k" * 32
    lines = _log(tmp_path, key=key)
    assert audit.verify(tmp_path, key).ok and audit.verify(tmp_path, key).signed
    # an attacker without the key rewrites record 3 and re-hashes the whole chain
    recs = [json.loads(line) for line in lines]
    recs[2]["who"] = "someone-else"
    for i, rec in enumerate(recs):
        rec["prev"] = recs[i - 1]["hash"] if i else audit.GENESIS
        rec["hash"] = audit.seal(rec, None)
    forged = [json.dumps(r, sort_keys=True) for r in recs]
    assert _verify(forged).ok  # a plain hash chain can be recomputed ...
    v = _verify(forged, key)
    assert v.broken_at == 1 and "signature" in v.why  # ... a signed one cannot (the first forged record)


def test_the_key_comes_from_the_stacks_secrets_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(audit.KEY_ENV, raising=False)
    (tmp_path / "secrets").mkdir()
    (tmp_path / audit.KEY_FILE).write_text("a-stack-audit-key-of-some-length\n")
    _log(tmp_path, 3)
    v = audit.verify(tmp_path)
    assert v.ok and v.signed
    assert not audit.verify(tmp_path, b"another key").ok


def test_a_torn_last_line_is_a_crash_cut_by_the_next_append_and_said_so(tmp_path: Path) -> None:
    _log(tmp_path, 3)
    torn = '{"at": "2026-12-01T00:00:00+00:00", "wh'
    with (tmp_path / audit.FILE).open("a") as f:
        f.write(torn)
    assert audit.verify(tmp_path).ok
    _log(tmp_path, 1)
    lines = (tmp_path / audit.FILE).read_text().splitlines()
    assert len(lines) == 4 and f"cut a torn record of {len(torn)} bytes" in json.loads(lines[-1])["repaired"]
    assert audit.verify(tmp_path).ok


def test_records_before_the_chain_are_counted_never_accepted_after_it(tmp_path: Path) -> None:
    old = json.dumps({"at": "2026-11-01T00:00:00+00:00", "who": "x", "what": "rollout", "why": "", "stack": "s"})
    (tmp_path / audit.FILE).write_text(old + "\n")
    lines = _log(tmp_path, 2)
    v = _verify(lines)
    assert v.ok and v.legacy == 1 and v.records == 3
    assert _verify(lines + [old]).broken_at == 4
