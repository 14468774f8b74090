"""Any valid document renders in every format: unicode, empty sections, huge and tiny values,
control characters. Markdown stays under its limit, JUnit stays valid XML with right counts."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

import html5lib
from hypothesis import HealthCheck, given, settings, strategies as st

from gpufleet.reports.document import (Bar, BarChart, CaseStatus, Distribution, DistributionGroup, Document, HeatCell,
                                    HeatMap, LineHistory, Paragraph, Section, Series, Span, Status, SummaryItem, Table,
                                    TestCase, TestCases, Timeline, ValueCount)
from gpufleet.reports.render import html, junit, markdown

text = st.text(max_size=40)  # every code point hypothesis draws, surrogates and controls included
number = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)
maybe = st.none() | number
label = st.text(min_size=1, max_size=12)


@st.composite
def heat_maps(draw):
    rows = draw(st.lists(label, min_size=1, max_size=8))
    cols = draw(st.lists(label, min_size=1, max_size=8))
    keys = draw(st.sets(st.tuples(st.integers(0, len(rows) - 1), st.integers(0, len(cols) - 1)), max_size=20))
    return HeatMap(title=draw(text), unit=draw(text), row_labels=rows, col_labels=cols, floor=draw(maybe),
                   cells=[HeatCell(row=r, col=c, value=draw(number)) for r, c in sorted(keys)])


@st.composite
def tables(draw):
    cols = draw(st.lists(text, min_size=1, max_size=4))
    cell = st.one_of(text, st.integers(-10**18, 10**18), number, st.booleans(), st.none())
    rows = draw(st.lists(st.lists(cell, min_size=len(cols), max_size=len(cols)), max_size=15))
    return Table(title=draw(text), columns=cols, rows=rows, caption=draw(text))


@st.composite
def spans(draw):
    start = draw(st.floats(0, 1e7))
    return Span(lane=draw(label), stage=draw(label), start=start, end=start + draw(st.floats(0, 1e7)))


@st.composite
def histories(draw):
    runs = draw(st.lists(text, min_size=1, max_size=6))
    series = draw(st.lists(st.builds(Series, name=text, values=st.lists(maybe, min_size=len(runs), max_size=len(runs))),
                           max_size=5))
    return LineHistory(title=draw(text), unit=draw(text), runs=runs, series=series, floor=draw(maybe))


cases = st.builds(TestCase, suite=text, name=text, status=st.sampled_from(CaseStatus), classname=text, message=text,
                  details=text, failure_type=text, output=text, seconds=st.none() | st.floats(0, 1e6))
blocks = st.one_of(
    st.builds(Paragraph, text=text),
    tables(),
    st.builds(BarChart, title=text, unit=text, floor=maybe, bars=st.lists(st.builds(Bar, label=text, value=maybe),
                                                                           max_size=30)),
    heat_maps(),
    st.builds(Timeline, title=text, unit=st.sampled_from(["s", "min", ""]), spans=st.lists(spans(), max_size=10)),
    st.builds(Distribution, title=text, groups=st.lists(st.builds(
        DistributionGroup, name=text, expected=st.none() | text,
        counts=st.lists(st.builds(ValueCount, value=text, count=st.integers(0, 10**6)), min_size=1, max_size=4)),
        max_size=4)),
    histories(),
    st.builds(TestCases, title=text, cases=st.lists(cases, max_size=8)),
)
documents = st.builds(
    Document, kind=st.text(min_size=1, max_size=10), title=text, stack=st.none() | text,
    generated_at=st.datetimes(timezones=st.just(timezone.utc), min_value=datetime(2000, 1, 1),
                              max_value=datetime(2100, 1, 1)),
    status=st.sampled_from(Status), summary=st.lists(st.builds(SummaryItem, key=text, value=text), max_size=4),
    sections=st.lists(st.builds(Section, title=text, blocks=st.lists(blocks, max_size=4)), max_size=4))


def _parse_strictly(page: str) -> None:
    """Parse the page as a browser would (the WHATWG algorithm), failing on the first parse error.

    Why html5lib and not html.parser: html.parser never calls `error()` (Python 3.10 removed it), so
    it accepts anything; html5lib's strict mode raises ParseError on each error the spec names
    (unclosed or misnested tags, stray end tags, bad attributes, control characters, a missing doctype).
    """
    html5lib.HTMLParser(strict=True).parse(page)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(documents, st.integers(800, 20_000))
def test_every_document_renders_in_every_format(doc, limit):
    md = markdown.render(doc, limit=limit)
    assert len(md.encode("utf-8")) <= limit
    lines = md.splitlines()
    assert sum(x.startswith("<details><summary>") for x in lines) == sum(x == "</details>" for x in lines)

    xml = junit.render(doc)
    root = ET.fromstring(xml.encode("utf-8"))
    cases_ = doc.test_cases()
    assert int(root.get("tests")) == len(cases_) == len(root.findall(".//testcase"))
    assert int(root.get("failures")) == sum(c.status is CaseStatus.FAIL for c in cases_) == len(root.findall(".//failure"))
    assert int(root.get("errors")) == sum(c.status is CaseStatus.ERROR for c in cases_) == len(root.findall(".//error"))

    page = html.render(doc)
    _parse_strictly(page)
    charts = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    assert len(charts) == page.count("<svg ") == page.count("</svg>")
    for chart in charts:  # every chart is well-formed XML: escaped text, quoted attributes, closed elements
        ET.fromstring(chart)
    assert Document.model_validate_json(doc.model_dump_json()) == doc
