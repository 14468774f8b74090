"""The HTML report: self-contained, opened in headless Chromium with the network disabled,
charts asserted on the rendered DOM; a screenshot kept under the test's tmp path."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from gpufleet.reports.document import Bar, BarChart, Document, HeatCell, HeatMap, Section, Series, Status
from gpufleet.reports.render import html, svg
from tests.reports import chromium as C
from tests.reports.sample import BUSBW, NODES, WHEN, sample_document

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_reports.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_reports", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def browser() -> str:
    return C.binary()


def _no_urls(text: str) -> list[str]:
    return re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}", text)


def test_sample_html_has_no_external_reference():
    page = html.render(sample_document())
    assert not _no_urls(page) and not re.search(r"https?:|\bsrc=|\bhref=|url\((?!#)|@import", page)
    assert f'content="{html.CSP}"' in page and "<script" not in page.replace("&lt;script", "")
    assert page.count("<svg ") == 5 and page.count('role="img"') == 5


def test_sample_charts_in_the_rendered_dom(browser, tmp_path):
    path = tmp_path / "sample.html"
    path.write_text(html.render(sample_document()), encoding="utf-8")
    shot = tmp_path / "sample.png"
    page = C.open_page(browser, path, tmp_path / "chromium", screenshot=shot)
    print(f"screenshot: {shot}")
    assert page.page_requests == []
    assert "document schema v1" in page.text  # the footer: the page loaded to its end

    bars = page.find("rect", "bar")
    assert [b.attrs["data-label"] for b in bars] == NODES
    assert [b.attrs["data-value"] for b in bars] == ["" if v is None else repr(v) for v in BUSBW]
    assert [n for n, b in zip(NODES, bars) if "low" in b.classes] == ["node-02"]
    assert "missing" in bars[4].classes
    assert [f.attrs["data-floor"] for f in page.find("line", "floor")] == ["430.0", "350.0"]

    cells = {(c.attrs["data-row"], c.attrs["data-col"]): c for c in page.find("rect", "cell")}
    assert len(cells) == 5 and cells[("node-02", "node-03")].attrs["data-value"] == "120.0"
    assert {k for k, c in cells.items() if "low" in c.classes} == {("node-02", "node-03"), ("node-03", "node-02")}
    assert len(page.find("rect", "unmeasured")) == 1

    spans = page.find("rect", "span")
    assert [(s.attrs["data-lane"], s.attrs["data-stage"]) for s in spans][-1] == ("batch 1", "gates")
    assert spans[-1].attrs["data-end"] == "3900.5"

    segments = {(s.attrs["data-group"], s.attrs["data-value"]): s for s in page.find("rect", "segment")}
    assert segments[("nvidia-driver", "570.172.08")].attrs["data-count"] == "1"
    assert segments[("nvidia-driver", "580.95.05")].attrs["data-expected"] == "true"
    assert segments[("nvidia-driver", "570.172.08")].attrs["data-expected"] == "false"

    points = page.find("circle", "point")
    assert len(points) == 5  # block 1 was not measured in the second run
    low = [p for p in points if "low" in p.classes]
    assert [(p.attrs["data-series"], p.attrs["data-run"], p.attrs["data-value"]) for p in low] == \
        [("block 1", "2026-07-14", "341.0")]

    charts = page.find("svg")
    assert len(charts) == 5 and all(s.attrs.get("role") == "img" and s.attrs.get("aria-labelledby") for s in charts)
    assert len(page.find("desc")) == 5
    assert "<script>alert(1)</script>" not in page.dom  # the paragraph's text stayed text
    assert shot.stat().st_size > 10_000


def test_the_request_check_sees_a_leaking_page(browser, tmp_path):
    """Negative control: a page with external references is caught by the net log check."""
    leak = tmp_path / "leak.html"
    leak.write_text('<img src="http://leak.invalid/x.png"><div style="background:url(https://leak2.invalid/y)">x</div>')
    page = C.open_page(browser, leak, tmp_path / "chromium")
    assert set(page.page_requests) >= {"http://leak.invalid/x.png"}


def test_1250_nodes_stay_readable(browser, tmp_path):
    doc, _ = _bench().fleet_document(1250)
    text = html.render(doc)
    assert len(text) < 5_000_000 and not _no_urls(text)
    path = tmp_path / "fleet.html"
    path.write_text(text, encoding="utf-8")
    shot = tmp_path / "fleet.png"
    page = C.open_page(browser, path, tmp_path / "chromium", screenshot=shot, window=(1280, 2600))
    print(f"screenshot: {shot}")
    assert page.page_requests == []
    assert len(page.find("rect", "bar")) == 1250  # one bar per node, scrolled horizontally
    cells = page.find("rect", "cell")
    assert 0 < len(cells) <= svg.HEAT_GRID ** 2  # not 1.5M
    assert "Aggregated to blocks of 20 x 20" in page.text
    assert all(int(c.attrs["data-count"]) >= 1 for c in cells)
    assert len(page.find("rect", "span")) == 10 * 4
    assert [b.attrs["data-series-count"] for b in page.find("polygon", "band")] == ["78"]  # not 78 tangled lines
    assert [x.attrs["data-series"] for x in page.find("polyline", "line")] == ["block 7"]  # the regressed block
    assert [p.attrs["data-value"] for p in page.find("circle", "low")] == ["338.0"]


def test_bars_beyond_the_limit_are_aggregated_to_their_lowest():
    n = svg.BAR_LIMIT * 3
    chart = BarChart(title="many", unit="GB/s", floor=400.0,
                     bars=[Bar(label=f"n{i}", value=100.0 if i == 4_321 else 480.0) for i in range(n)])
    drawn = svg.bar_chart(chart, "x", "d")
    bars = re.findall(r'<rect class="bar (\w+)"[^>]*data-label="([^"]*)" data-value="([^"]*)" data-items="(\d+)"',
                      drawn.markup)
    assert len(bars) <= svg.BAR_LIMIT // 2 and sum(int(b[3]) for b in bars) == n
    assert [b for b in bars if b[0] == "low"] == [("low", "n4320 … n4325", "100.0", "6")]
    assert drawn.notes and "lowest value of 6 consecutive items" in drawn.notes[0]


def test_notable_series_are_the_ones_below_the_floor_or_regressed():
    assert svg.notable(Series(name="a", values=[380.0, 381.0, 340.0]), floor=None)  # 10% under its median
    assert not svg.notable(Series(name="b", values=[380.0, 381.0, 370.0]), floor=None)  # within 5%
    assert svg.notable(Series(name="c", values=[300.0, None, 380.0]), floor=350.0)  # was below the floor
    assert not svg.notable(Series(name="d", values=[None, 380.0]), floor=350.0)


def test_heat_map_elements_are_capped_whatever_the_size():
    labels = [f"n{i}" for i in range(1250)]
    cells = [HeatCell(row=i, col=j, value=float(i + j)) for i in range(0, 1250, 3) for j in range(0, 1250, 97)]
    doc = Document(kind="t", title="t", generated_at=WHEN, status=Status.OK, sections=[Section(title="s", blocks=[
        HeatMap(title="pairs", row_labels=labels, col_labels=labels, cells=cells)])])
    page = html.render(doc)
    assert page.count('class="cell ') <= svg.HEAT_GRID ** 2
