"""GPU utilisation per node over the report's window, from Prometheus's HTTP API (`query_range`).

Why one query for the whole fleet: `avg by (node) (DCGM_FI_DEV_GPU_UTIL)` over the window at one
step is one request and one series per node (1,250 series), instead of a query per job. The
step keeps every series under Prometheus's 11,000 points per series and the whole answer under
`POINT_BUDGET` points (a month of 1,250 nodes at 5 minutes would be an 11-million-point, several
hundred MB answer; the budget widens the step to about 26 minutes instead); jobs shorter than the
step may fall between samples and are reported as not measured, never as idle. The `node` label is the one the scrape config and the rules put on every target
(`gpufleet.monitoring.rules.NODE_LABEL`).

Failure: a connection error, an HTTP error or an API answer with `status: error` raises
`PrometheusError`; the report then says the utilisation could not be read and exits 1.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from array import array
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from gpufleet.cost.intervals import Interval
from gpufleet.monitoring.metrics import GPU_UTIL
from gpufleet.monitoring.rules import NODE_LABEL

MAX_POINTS = 11_000  # Prometheus refuses a range query with more points per series
POINT_BUDGET = 2_000_000  # all series together: the answer stays tens of MB
MIN_STEP_S = 60


class PrometheusError(Exception):
    """Prometheus did not answer usefully: the utilisation is unknown, not zero."""


class RangeQuery(Protocol):
    def __call__(self, query: str, start: float, end: float, step: float) -> Mapping[str, Any]: ...


def step_for(window: Interval, series: int = 1, wanted_s: float = 300) -> float:
    """The wanted step, widened so each series stays under Prometheus's points limit and all
    `series` together under the point budget."""
    span = window[1] - window[0]
    return float(max(MIN_STEP_S, wanted_s, math.ceil(span / (MAX_POINTS - 1)), math.ceil(span * series / POINT_BUDGET)))


def utilisation_query() -> str:
    return f"avg by ({NODE_LABEL}) ({GPU_UTIL})"


@dataclass
class NodeSeries:
    """One node's samples: parallel arrays of times and values (compact at 1,250 x 8,640 points)."""

    times: array
    values: array

    def mean(self, span: Interval) -> tuple[float, int] | None:
        """(mean, samples) of the samples inside `span`, or None when there are none."""
        from bisect import bisect_left, bisect_right

        lo, hi = bisect_left(self.times, span[0]), bisect_right(self.times, span[1])
        if hi <= lo:
            return None
        return sum(self.values[lo:hi]) / (hi - lo), hi - lo


def parse_matrix(answer: Mapping[str, Any]) -> dict[str, NodeSeries]:
    """A query_range answer (`{"status": "success", "data": {"resultType": "matrix", ...}}`) by node."""
    if answer.get("status") != "success":
        raise PrometheusError(f"Prometheus answered {answer.get('errorType', 'an error')}: {answer.get('error', answer)}")
    data = answer.get("data") or {}
    if data.get("resultType") != "matrix":
        raise PrometheusError(f"expected a matrix from query_range, got {data.get('resultType')!r}")
    out: dict[str, NodeSeries] = {}
    for series in data.get("result") or ():
        node = (series.get("metric") or {}).get(NODE_LABEL)
        if not node:
            continue
        times, values = array("d"), array("d")
        for ts, value in series.get("values") or ():
            v = float(value)
            if math.isfinite(v):
                times.append(float(ts))
                values.append(v)
        out[node] = NodeSeries(times, values)
    return out


def job_utilisation(series: Mapping[str, NodeSeries], nodes: Sequence[str], span: Interval) -> float | None:
    """Mean GPU utilisation (%) over the job's nodes and time, weighted by samples; None: not measured."""
    total, count = 0.0, 0
    for node in nodes:
        s = series.get(node)
        m = s.mean(span) if s else None
        if m:
            total += m[0] * m[1]
            count += m[1]
    return total / count if count else None


class HttpRangeQuery:
    """The adapter: GET <url>/api/v1/query_range with urllib (no client library needed)."""

    def __init__(self, base_url: str, timeout_s: float = 60) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def __call__(self, query: str, start: float, end: float, step: float) -> Mapping[str, Any]:
        qs = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
        url = f"{self.base_url}/api/v1/query_range?{qs}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # Prometheus explains a bad query in a JSON body
            try:
                body = json.loads(exc.read())
            except (ValueError, OSError):
                body = {}
            raise PrometheusError(f"Prometheus at {self.base_url} answered HTTP {exc.code}: "
                                  f"{body.get('error', exc.reason)}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"Prometheus at {self.base_url} unreachable: {getattr(exc, 'reason', exc)}") from None


def fetch(query: RangeQuery, window: Interval, nodes: int = 1) -> tuple[dict[str, NodeSeries], float]:
    """Every node's utilisation series over the window (`nodes`: how many series to expect), and the step used."""
    step = step_for(window, nodes)
    return parse_matrix(query(utilisation_query(), window[0], window[1], step)), step
