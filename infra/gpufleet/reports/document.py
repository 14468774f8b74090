"""The neutral report document every renderer reads: rollout, gate, drift, audit, later patrol,
upgrade and cost reports all become one `Document` before they become Markdown, JUnit or HTML.

Why a second model next to each report's own JSON: the source models (RolloutReport, admission
records, drift findings) are the versioned truth and keep their own shapes; the renderers must not
know any of them. An adapter maps a source model to a Document once, and every format follows.

Shape: a Document has a title, a stack, a status, summary key-values (shown first everywhere) and
sections; a section is an ordered list of blocks: paragraphs, tables, charts and test cases.
Charts are typed (bar against a floor, heat map, timeline, distribution, line history) so each
renderer draws or tabulates them the way its medium reads best. Test cases are what JUnit shows;
the other formats list the ones that did not pass.

Text is plain: renderers escape everything except `code` spans (a backtick-quoted part, for
reason codes, slots and stacks), shown as code in Markdown and HTML.

Versioned (`schema_version`) because documents are written next to the source JSON and read back
by CI steps and dashboards long after the code that wrote them changed. Frozen and `extra=forbid`
so an adapter's typo is an error, not a silently empty chart.
"""

from __future__ import annotations

import math
from datetime import datetime
from enum import Enum
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import gpufleet

DOCUMENT_SCHEMA_VERSION = 1

Cell = Union[str, int, float, bool, None]
"""A table cell: numbers stay numbers so JSON readers and HTML alignment can use them."""


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _finite(v: float | None, what: str) -> float | None:
    if v is not None and not math.isfinite(v):
        raise ValueError(f"{what} must be a finite number, got {v!r}")
    return v


class Status(str, Enum):
    """The report's outcome, one per exit code of DESIGN.md section 8 (0, 3, 4, 1)."""

    OK = "ok"
    FAILED = "failed"  # a gate said no, a rollout halted or ended short
    DRIFT = "drift"  # drift or audit found a difference
    ERROR = "error"  # the report could not be completed (a layer that could not run)


class Tone(str, Enum):
    """How a paragraph or summary value should stand out; renderers map it to emphasis/colour."""

    INFO = "info"
    GOOD = "good"
    WARNING = "warning"
    BAD = "bad"


class SummaryItem(_M):
    """One key-value of the summary shown at the top of every rendering."""

    key: str
    value: str
    tone: Tone = Tone.INFO


# ------------------------------------------------------------------ blocks


class Paragraph(_M):
    """Text; the only markup is `code` spans (backticks), which renderers show as code."""

    kind: Literal["paragraph"] = "paragraph"
    text: str
    tone: Tone = Tone.INFO


class Table(_M):
    """Columns and rows of cells. Long tables are folded (Markdown <details>) or scrolled (HTML)."""

    kind: Literal["table"] = "table"
    title: str = ""
    columns: list[str]
    rows: list[list[Cell]] = Field(default_factory=list)
    caption: str = ""

    @model_validator(mode="after")
    def _rectangular(self) -> Table:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: row {i} has {len(row)} cells, "
                                 f"expected {len(self.columns)} (one per column)")
        return self


class Bar(_M):
    """One item of a bar chart; `value` None means not measured (drawn as a gap, never as 0)."""

    label: str
    value: float | None
    note: str = ""

    @field_validator("value")
    @classmethod
    def _value_finite(cls, v: float | None) -> float | None:
        return _finite(v, "bar value")


class BarChart(_M):
    """Values per item against a floor line, e.g. intra-node busbw per node vs the gate's floor.

    Items at or above the floor pass; below it they are drawn in the failing colour.
    """

    kind: Literal["bar_chart"] = "bar_chart"
    title: str
    unit: str = ""
    bars: list[Bar] = Field(default_factory=list)
    floor: float | None = None
    floor_label: str = "floor"
    caption: str = ""

    @field_validator("floor")
    @classmethod
    def _floor_finite(cls, v: float | None) -> float | None:
        return _finite(v, "floor")

    def below_floor(self) -> list[Bar]:
        """The measured bars under the floor, in chart order."""
        if self.floor is None:
            return []
        return [b for b in self.bars if b.value is not None and b.value < self.floor]


class HeatCell(_M):
    """One measured pair: indices into the heat map's labels. Unmeasured pairs have no cell."""

    row: int = Field(ge=0)
    col: int = Field(ge=0)
    value: float

    @field_validator("value")
    @classmethod
    def _value_finite(cls, v: float) -> float:
        return _finite(v, "heat map value")  # type: ignore[return-value]


class HeatMap(_M):
    """A sparse matrix, e.g. pair bandwidth between nodes; missing cells are unmeasured pairs.

    Sparse because at 1,250 nodes only the tested pairs exist (a few per node), not 1.5M.
    `floor`, when given, marks cells under it as failing.
    """

    kind: Literal["heat_map"] = "heat_map"
    title: str
    unit: str = ""
    row_labels: list[str]
    col_labels: list[str]
    cells: list[HeatCell] = Field(default_factory=list)
    floor: float | None = None
    caption: str = ""

    @model_validator(mode="after")
    def _cells_in_range(self) -> HeatMap:
        _finite(self.floor, "floor")
        seen: set[tuple[int, int]] = set()
        for c in self.cells:
            if c.row >= len(self.row_labels) or c.col >= len(self.col_labels):
                raise ValueError(f"heat map {self.title!r}: cell ({c.row}, {c.col}) outside "
                                 f"{len(self.row_labels)}x{len(self.col_labels)} labels")
            if (c.row, c.col) in seen:
                raise ValueError(f"heat map {self.title!r}: cell ({c.row}, {c.col}) given twice")
            seen.add((c.row, c.col))
        return self


class Span(_M):
    """One stage of one lane (e.g. batch 3, configure) from `start` to `end` (same unit)."""

    lane: str
    stage: str
    start: float
    end: float

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        _finite(self.start, "span start")
        _finite(self.end, "span end")
        if self.end < self.start:
            raise ValueError(f"span {self.lane}/{self.stage} ends ({self.end}) before it starts ({self.start})")
        return self


class Timeline(_M):
    """A Gantt chart: lanes (batches) in first-seen order, one bar per stage span."""

    kind: Literal["timeline"] = "timeline"
    title: str
    unit: str = "s"
    spans: list[Span] = Field(default_factory=list)
    caption: str = ""

    def lanes(self) -> list[str]:
        return list(dict.fromkeys(s.lane for s in self.spans))

    def stages(self) -> list[str]:
        return list(dict.fromkeys(s.stage for s in self.spans))


class ValueCount(_M):
    value: str
    count: int = Field(ge=0)


class DistributionGroup(_M):
    """How many items have each value of one component, e.g. nodes per installed driver version.

    `expected` (the BOM's pin) marks every other value as a deviation.
    """

    name: str
    expected: str | None = None
    counts: list[ValueCount]

    @property
    def total(self) -> int:
        return sum(c.count for c in self.counts)

    def deviating(self) -> list[ValueCount]:
        if self.expected is None:
            return []
        return [c for c in self.counts if c.value != self.expected and c.count]


class Distribution(_M):
    """Version distribution per component: one stacked bar per group."""

    kind: Literal["distribution"] = "distribution"
    title: str
    groups: list[DistributionGroup] = Field(default_factory=list)
    caption: str = ""


class Series(_M):
    """One line of a line history: a value per run (None where the series was not measured)."""

    name: str
    values: list[float | None]

    @field_validator("values")
    @classmethod
    def _values_finite(cls, v: list[float | None]) -> list[float | None]:
        for x in v:
            _finite(x, "series value")
        return v


class LineHistory(_M):
    """Values per series over runs, e.g. baseline busbw per block over the last rollouts."""

    kind: Literal["line_history"] = "line_history"
    title: str
    unit: str = ""
    runs: list[str]
    series: list[Series] = Field(default_factory=list)
    floor: float | None = None
    caption: str = ""

    @model_validator(mode="after")
    def _aligned(self) -> LineHistory:
        _finite(self.floor, "floor")
        for s in self.series:
            if len(s.values) != len(self.runs):
                raise ValueError(f"line history {self.title!r}: series {s.name!r} has {len(s.values)} values, "
                                 f"expected {len(self.runs)} (one per run)")
        return self


class CaseStatus(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"


class TestCase(_M):
    """One node and check (JUnit testcase). `classname` defaults to the suite in JUnit output.

    `failure_type` becomes the JUnit failure/error `type` (e.g. QUARANTINE); `details` its body;
    `output` goes to system-out (e.g. a WARN that did not fail the case).
    """

    __test__ = False  # not a pytest test class

    suite: str
    name: str
    status: CaseStatus
    classname: str = ""
    message: str = ""
    details: str = ""
    failure_type: str = ""
    output: str = ""
    seconds: float | None = Field(default=None, ge=0)


class TestCases(_M):
    """A group of test cases; JUnit writes all of them, the other formats the ones not passing."""

    __test__ = False

    kind: Literal["test_cases"] = "test_cases"
    title: str = "Checks"
    cases: list[TestCase] = Field(default_factory=list)


Chart = Union[BarChart, HeatMap, Timeline, Distribution, LineHistory]
Block = Annotated[Union[Paragraph, Table, BarChart, HeatMap, Timeline, Distribution, LineHistory, TestCases],
                  Field(discriminator="kind")]


class Section(_M):
    title: str
    blocks: list[Block] = Field(default_factory=list)


class Document(_M):
    """A whole report, ready for any renderer. `kind` names the source (rollout, gate, drift, audit)."""

    schema_version: int = DOCUMENT_SCHEMA_VERSION
    kind: str
    title: str
    stack: str | None = None
    generated_at: datetime
    status: Status
    summary: list[SummaryItem] = Field(default_factory=list)
    sections: list[Section] = Field(default_factory=list)
    gpufleet_version: str = gpufleet.__version__

    def test_cases(self) -> list[TestCase]:
        """Every test case of the document, in section order."""
        return [c for s in self.sections for b in s.blocks if isinstance(b, TestCases) for c in b.cases]
