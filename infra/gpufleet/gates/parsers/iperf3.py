"""iperf3's `-J` output: received TCP bandwidth, sender retransmits, or the error iperf3 reports.

Why `sum_received`: the receiver's count is what crossed the link; the sender's includes what
was still in flight or retransmitted. iperf3 prints an `error` key (and an empty `end`) when it
could not connect or the test broke off: that is a failed link, never a zero-bandwidth one.
"""

from __future__ import annotations

import json

from gpufleet.gates.parsers.common import ParseModel


class Iperf3Result(ParseModel):
    received_bps: float | None = None
    sent_bps: float | None = None
    retransmits: int | None = None
    seconds: float | None = None
    streams: int = 0
    error: str | None = None
    unreadable: bool = False  # the output is not iperf3's document: it says nothing about the link


def parse_json(text: str) -> Iperf3Result:
    start = text.find("{")
    if start < 0:
        return Iperf3Result(error=f"no JSON object in iperf3 output: {text.strip()[:120]!r}", unreadable=True)
    try:
        doc = json.loads(text[start:])
    except (json.JSONDecodeError, RecursionError) as exc:
        return Iperf3Result(error=f"invalid iperf3 JSON: {exc}", unreadable=True)
    try:
        return _read(doc)
    except (AttributeError, TypeError, ValueError) as exc:  # a value of a shape iperf3 never writes
        return Iperf3Result(error=f"unreadable iperf3 JSON: {type(exc).__name__}: {exc}"[:300], unreadable=True)


def _read(doc: dict) -> Iperf3Result:
    end = doc.get("end", {})
    received, sent = end.get("sum_received", {}), end.get("sum_sent", {})
    if not isinstance(received, dict) or not isinstance(sent, dict):
        raise TypeError("end.sum_received / end.sum_sent is not an object")
    error = doc.get("error")
    if not received and error is None:
        error = "no end.sum_received in iperf3 output (the test did not finish)"
    return Iperf3Result(
        received_bps=_f(received.get("bits_per_second")), sent_bps=_f(sent.get("bits_per_second")),
        retransmits=int(sent["retransmits"]) if isinstance(sent.get("retransmits"), int) else None,
        seconds=_f(received.get("seconds")), streams=len(end.get("streams") or []),
        error=str(error) if error is not None else None)


def _f(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None
