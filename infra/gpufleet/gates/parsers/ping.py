"""iputils `ping` summary: packets sent/received, loss and the `rtt min/avg/max/mdev` line.

Why the summary only: per-reply lines vary by version and locale; the two summary lines are
the stable part. With every packet lost iputils prints no rtt line at all (and `+N errors`
when the host is unreachable), so no rtt is a measurement of total loss, not a parse failure.
"""

from __future__ import annotations

import re

from gpufleet.gates.parsers.common import ParseModel

_PACKETS = re.compile(r"^(\d+) packets transmitted, (\d+) (?:packets )?received,(?: \+(\d+) errors,)?"
                      r"(?: \+\d+ duplicates,)? ([\d.]+)% packet loss", re.MULTILINE)
_RTT = re.compile(r"^(?:rtt|round-trip) min/avg/max/(?:mdev|stddev) = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms",
                  re.MULTILINE)


class PingResult(ParseModel):
    transmitted: int | None = None
    received: int | None = None
    errors: int = 0
    loss_percent: float | None = None
    rtt_min_ms: float | None = None
    rtt_avg_ms: float | None = None
    rtt_max_ms: float | None = None
    rtt_mdev_ms: float | None = None
    problems: tuple[str, ...] = ()


def parse_summary(text: str) -> PingResult:
    packets = _PACKETS.search(text)
    if packets is None:
        return PingResult(problems=(f"no ping statistics line in: {text.strip()[-160:]!r}",))
    rtt = _RTT.search(text)
    mn, avg, mx, mdev = (float(x) for x in rtt.groups()) if rtt else (None, None, None, None)
    return PingResult(transmitted=int(packets[1]), received=int(packets[2]), errors=int(packets[3] or 0),
                      loss_percent=float(packets[4]), rtt_min_ms=mn, rtt_avg_ms=avg, rtt_max_ms=mx, rtt_mdev_ms=mdev)
