"""Markdown: the golden sample, escaping, folding, and the GitHub size caps."""

from __future__ import annotations

import re

import pytest

from gpufleet.reports.document import Document, Paragraph, Section, Status, Table
from gpufleet.reports.render import markdown
from tests.reports.sample import WHEN, sample_document


def test_sample_matches_golden(golden):
    golden.check("sample.md", markdown.render(sample_document()))


def test_truncated_sample_matches_golden(golden):
    golden.check("sample-truncated.md", markdown.render(sample_document(), limit=1_800))


def test_summary_comes_first_and_text_is_escaped():
    md = markdown.render(sample_document())
    assert md.index("**quarantined:**") < md.index("## Busbw")
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "\x07" not in md and "\x00" not in md
    assert "Pipes \\| stars \\* underscores \\_" in md
    assert "second line" in md and "\nsecond line" not in md  # one line per table cell / paragraph
    assert "`busbw-low|<x>` and a lone \\` backtick" in md  # a code span shown literally, a lone backtick escaped
    assert markdown.escape("a `x|y` b", in_table=True) == "a `x\\|y` b"  # in a cell the pipe must not end it


def test_long_tables_are_folded_short_ones_are_not():
    md = markdown.render(sample_document())
    assert "<details><summary>Nodes (12 rows)</summary>" in md
    assert "**Pair busbw: cells below the floor**" in md  # two rows: not folded
    assert md.count("<details>") == md.count("</details>")


def test_charts_become_what_needs_attention():
    md = markdown.render(sample_document())
    assert "| node-02 | 301.25 GB/s | quarantine |" in md
    assert "| node-04 | not measured |  |" in md
    assert "| node-02 | node-03 | 120 GB/s |" in md and "| node-03 | node-02 | 118 GB/s |" in md
    assert "| nvidia-driver | 580.95.05 | 580.95.05: 5, 570.172.08: 1 | 1 |" in md
    assert "| block 1 | 379 GB/s | 379 GB/s | 341 GB/s | -10.0% | 341 GB/s |" in md
    assert "| batch 1 | gates | 50m00s | 1h05m00s | 15m00s |" in md


def _big(rows: int) -> Document:
    return Document(kind="t", title="big", generated_at=WHEN, status=Status.OK, sections=[
        Section(title="first", blocks=[Paragraph(text="kept")]),
        Section(title="nodes", blocks=[Table(title="Nodes", columns=["slot", "note"],
                                             rows=[[f"node-{i:05d}", "é" * 40] for i in range(rows)])]),
        Section(title="after", blocks=[Paragraph(text="dropped")])])


@pytest.mark.parametrize("limit", [markdown.COMMENT_LIMIT, 5_000, 100_000])
def test_cut_to_the_limit_with_a_note_and_closed_details(limit):
    md = markdown.render(_big(20_000), limit=limit, full_report="reports/local/rollout.html")
    assert len(md.encode("utf-8")) <= limit
    assert "kept" in md and "dropped" not in md
    assert md.count("<details>") == md.count("</details>") == 1
    note = md.strip().splitlines()[-1]
    assert note.startswith("> **Truncated:**") and "reports/local/rollout.html" in note
    left_out = int(re.search(r"\*\* ([\d,]+) of", note).group(1).replace(",", ""))
    rows = sum(1 for line in md.splitlines() if line.startswith("| node-"))
    assert rows + left_out >= 20_000 - 1 and 0 < rows < 20_000


def test_no_note_when_everything_fits():
    md = markdown.render(_big(50), limit=markdown.COMMENT_LIMIT)
    assert "Truncated" not in md and "dropped" in md


def test_a_limit_too_small_for_any_report_is_refused():
    with pytest.raises(ValueError, match="no room"):
        markdown.render(_big(1), limit=100)
