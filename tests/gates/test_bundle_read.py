"""read_bundle reads files exactly as text-mode open() did (universal newlines, replaced bad UTF-8)."""

from __future__ import annotations

from gpufleet.gates import bundle as B, synth


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
    b = B.read_bundle(node)
    assert b.problems == ("manifest.json is not UTF-8 text (invalid start byte at byte 11)",)
    assert b.manifest_problem == b.problems[0] and b.slot == "n0"  # the folder's name
    m.write_text('{"slot": "n0",\r\n "bad": 1\r}', encoding="utf-8")  # CRLF/CR read as newlines: one extra field
    b = B.read_bundle(node)
    assert b.manifest_problem.startswith("manifest.json fields are invalid: bad: Extra inputs are not permitted")


def test_find_bundles_matches_pathlib(tmp_path):
    for name in ("b", "a", "c"):
        synth.write_node(tmp_path / name, synth.NodeSpec(slot=name))
    (tmp_path / "only-lspci").mkdir()
    (tmp_path / "only-lspci" / B.LSPCI_EFA).write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    known = set(B.BUNDLE_FILES) | {B.MANIFEST}
    want = [s for s in sorted(p for p in tmp_path.iterdir() if p.is_dir()) if any((s / n).is_file() for n in known)]
    assert B.find_bundles(tmp_path) == want
    assert [p.name for p in want] == ["a", "b", "c", "link", "only-lspci"]
    assert B.find_bundles(tmp_path / "a") == [tmp_path / "a"]
