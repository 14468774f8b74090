"""GPUFLEET_UPDATE_GOLDEN=1 (or --update-golden) rewrites a golden file and fails the test that did it."""

from __future__ import annotations

import pytest

from tests.reports.conftest import Golden


def test_a_rewrite_fails_loudly_naming_the_file(tmp_path) -> None:
    (tmp_path / "page.md").write_text("old\n", encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"REWROTE golden/page\.md") as failed:
        Golden(update=True, root=tmp_path).check("page.md", "new\n")
    assert "-old" in str(failed.value) and "+new" in str(failed.value)
    assert (tmp_path / "page.md").read_text(encoding="utf-8") == "new\n"  # and the file is rewritten


def test_a_new_golden_file_written_by_the_update_fails_too(tmp_path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"REWROTE golden/sub/new\.xml"):
        Golden(update=True, root=tmp_path).check("sub/new.xml", "<a/>\n")
    assert (tmp_path / "sub" / "new.xml").read_text(encoding="utf-8") == "<a/>\n"


def test_an_update_run_that_matches_rewrites_nothing_and_passes(tmp_path) -> None:
    path = tmp_path / "page.md"
    path.write_text("same\n", encoding="utf-8")
    before = path.stat().st_mtime_ns
    Golden(update=True, root=tmp_path).check("page.md", "same\n")
    assert path.stat().st_mtime_ns == before


def test_without_the_update_a_difference_fails_and_the_file_stays(tmp_path) -> None:
    (tmp_path / "page.md").write_text("old\n", encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match="output differs from golden/page.md"):
        Golden(update=False, root=tmp_path).check("page.md", "new\n")
    assert (tmp_path / "page.md").read_text(encoding="utf-8") == "old\n"
    with pytest.raises(pytest.fail.Exception, match="no golden file"):
        Golden(update=False, root=tmp_path).check("missing.md", "x")


def test_the_fixture_reads_the_variable(monkeypatch, request) -> None:
    from tests.reports import conftest

    monkeypatch.setenv("GPUFLEET_UPDATE_GOLDEN", "1")
    assert conftest.golden.__wrapped__(request).update is True
    monkeypatch.setenv("GPUFLEET_UPDATE_GOLDEN", "0")
    assert conftest.golden.__wrapped__(request).update is False
