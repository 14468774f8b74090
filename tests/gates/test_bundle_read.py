"""read_bundle reads files exactly as text-mode open() did (universal newlines, replaced bad UTF-8)."""

from __future__ import annotations

import json

from infra.gates import bundle as B, synth


def test_read_bundle_matches_text_mode_reads(tmp_path):
    node = tmp_path / "n0"
    synth.write_node(node, synth.NodeSpec(slot="n0"))
    (node / "kernel-log.txt").write_bytes(b"a\r\nb\rc\n" * 5000 + b"\xff\xfe tail\r")  # > 64 KiB, CRLF, bad UTF-8
    (node / "lspci-efa.txt").write_bytes(b"")
    (node / "big.txt").write_bytes(b"x" * (3 << 20))
    b = B.read_bundle(node)
    for p in node.iterdir():
        if p.name != B.MANIFEST:
            with open(p, encoding="utf-8", errors="replace") as fh:
                assert b.files[p.name] == fh.read(), p.name
    assert b.problems == ()


def test_manifest_crlf_and_bad_utf8(tmp_path):
    node = tmp_path / "n0"
    synth.write_node(node, synth.NodeSpec(slot="n0"))
    m = node / B.MANIFEST
    m.write_bytes(m.read_bytes().replace(b"\n", b"\r\n"))
    assert B.read_bundle(node).manifest.slot == "n0"
    m.write_bytes(b'{"slot": "n\xff0"}\r\n')
    try:
        m.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        want = f"manifest.json unreadable: {str(exc).splitlines()[0]}"
    assert B.read_bundle(node).problems == (want,)
    m.write_text('{"slot": "n0",\r\n "bad": 1\r}', encoding="utf-8")
    try:
        json.loads(m.read_text(encoding="utf-8"))
    except ValueError:
        pass
    assert B.read_bundle(node).problems[0].startswith("manifest.json unreadable: ")
