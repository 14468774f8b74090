"""write_report: every format written atomically under the reports folder, nothing on bad input."""

from __future__ import annotations

import json
import os

import pytest

from gpufleet.errors import ConfigError
from gpufleet.project import Project
from gpufleet.reports import write as W
from tests.reports.sample import sample_document


def test_all_formats_written_under_the_reports_dir(tmp_path):
    project = Project(root=tmp_path, name="p", stacks_dir=tmp_path / "stacks")
    doc = sample_document()
    paths = W.write_report(doc, doc, project.reports_dir("local"), "sample")
    assert {k: p.name for k, p in paths.items()} == {"json": "sample.json", "md": "sample.md",
                                                     "xml": "sample-junit.xml", "html": "sample.html"}
    assert all(p.parent == tmp_path / "reports" / "local" for p in paths.values())
    assert sorted(os.listdir(tmp_path / "reports" / "local")) == sorted(p.name for p in paths.values())  # no temp left
    assert json.loads(paths["json"].read_text())["kind"] == "sample"
    assert paths["md"].read_text().startswith("# Sample")


def test_a_sequence_of_models_is_a_json_array(tmp_path):
    doc = sample_document()
    paths = W.write_report(doc, [doc.summary[0], doc.summary[1]], tmp_path, "s", ["json"])
    assert json.loads(paths["json"].read_text()) == [{"key": "nodes", "value": "6", "tone": "info"},
                                                     {"key": "admitted", "value": "4", "tone": "good"}]


def test_unknown_format_or_bad_name_writes_nothing(tmp_path):
    doc = sample_document()
    with pytest.raises(ConfigError, match="unknown report format"):
        W.write_report(doc, doc, tmp_path / "out", "s", ["md", "pdf"])
    with pytest.raises(ConfigError, match="bad report name"):
        W.write_report(doc, doc, tmp_path / "out", "../s")
    assert not (tmp_path / "out").exists()


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "r.md"
    target.write_text("old")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        W.write_atomic(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["r.md"]


def test_a_cut_summary_points_at_the_files_next_to_it(tmp_path):
    doc = sample_document()
    md = W.write_report(doc, doc, tmp_path, "rollout", md_limit=1_000)["md"].read_text()
    assert len(md.encode("utf-8")) <= 1_000
    assert md.rstrip().endswith("see rollout.html and rollout.json.")
