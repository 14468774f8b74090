"""nccl-tests' text output, byte for byte as nccl-tests 2.19.6 prints it (src/util.cu).

Why its own module: the single-node preflight run and the multi-node launcher print the same
table; one writer keeps both at the real format (the project's real 2.19.6 capture,
tests/fixtures/real/nccl_all_reduce_perf__1gpu_h200_nccl2.28.9_debug_info__captured.txt):
the header with `unalign`, the `# Using devices` block, rows `%12li  %12li  %8s  %6s  %6s`
then `  %7s  %6s  %6s  %6g` per placement, numbers through getFloatStr (2, 1 or 0 decimals,
whichever fits the width), the footer's `%g` average.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Sequence

NCCL_TESTS_VERSION = "2.19.6"


def nccl_code(version: str) -> int:
    """NCCL_VERSION_CODE: 2.27.5 -> 22705 (nccl.h, NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z)."""
    parts = [int(x) for x in version.split(".")[:3] if x.isdigit()] + [0, 0, 0]
    return parts[0] * 10000 + parts[1] * 100 + parts[2]


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: the most decimals (2, 1, 0) that fit `width`, else an exponent."""
    for fmt in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(fmt) <= width:
            return fmt
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def g(value: float) -> str:
    """C's %g (six significant digits, trailing zeros dropped)."""
    return f"{value:g}"


@dataclass(frozen=True)
class Device:
    rank: int
    pid: int
    host: str
    device: int
    bus: int  # the PCI bus number: [0000:<bus>:00]
    name: str


def header(code: int, ngpus: int, min_bytes: int, max_bytes: int, warmup: int, iters: int,
           devices: Sequence[Device], collective: str = "all_reduce_perf") -> list[str]:
    lines = [f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={code} nccl-library={code}",
             f"# Collective test starting: {collective}",
             f"# nThread 1 nGpus {ngpus} minBytes {min_bytes} maxBytes {max_bytes} step: 2(factor) warmup iters: "
             f"{warmup} iters: {iters} agg iters: 1 validation: 1 graph: 0 unalign: 0", "#", "# Using devices"]
    lines += [f"#  Rank {d.rank:2d} Group {0:2d} Pid {d.pid:6d} on {d.host:>10} device {d.device:2d} "
              f"[{0:04x}:{d.bus:02x}:{0:02x}] {d.name}" for d in devices]
    return lines


def table_header() -> list[str]:
    e = ""
    return ["#",
            f"# {e:>10}  {e:>12}  {e:>8}  {e:>6}  {e:>6}           out-of-place                       in-place          ",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
            f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6} ",
            f"# {'(B)':>10}  {'(elements)':>12}  {e:>8}  {e:>6}  {e:>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  "
            f"{e:>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {e:>6} "]


def row(size: int, busbw: float, ranks: int, wrong: int = 0, in_place_factor: float = 1.0) -> str:
    """One all_reduce row of float sum: algbw = size / time, busbw = algbw x 2(n-1)/n."""
    factor = 2 * (ranks - 1) / ranks if ranks > 1 else 1.0
    body = []
    for bus in (busbw, busbw * in_place_factor):
        alg = bus / factor if ranks > 1 else bus
        t = size / (alg * 1e9) * 1e6 if alg > 0 else 0.0
        shown_bus = bus if ranks > 1 else 0.0  # one rank moves nothing between ranks
        body.append(f"  {float_str(t, 7)}  {float_str(alg, 6)}  {float_str(shown_bus, 6)}  {g(wrong):>6}")
    return f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}" + "".join(body)


def footer(avg_busbw: float, errors: int = 0, collective: str = "all_reduce_perf") -> list[str]:
    """writeResultFooter, then finalizeFooter's `#` and writeErrors' empty line (no NCCL error)."""
    return [f"# {'Out of bounds values':<20} : {errors} {'FAILED' if errors else 'OK'}",
            f"# {'Avg bus bandwidth':<20} : {g(avg_busbw)} ", "#", f"# Collective test concluded: {collective}", "#",
            "", ""]


def all_reduce(code: int, ngpus: int, sizes: Sequence[int], busbw_at: Callable[[int], float], ranks: int,
               devices: Sequence[Device], net_lines: Sequence[str] = (), warmup: int = 5, iters: int = 20,
               wrong_at: Callable[[int], int] = lambda s: 0) -> list[str]:
    """The whole run as rank 0 prints it (NCCL_DEBUG lines after the device block, as in the real
    capture), without launcher prefixes."""
    lines = header(code, ngpus, sizes[0], sizes[-1], warmup, iters, devices) + list(net_lines) + table_header()
    buses = []
    for s in sizes:
        bus = busbw_at(s)
        buses.append(bus if ranks > 1 else 0.0)
        lines.append(row(s, bus, ranks, wrong_at(s)))
    return lines + footer(sum(buses) / len(buses) if buses else 0.0, errors=sum(wrong_at(s) for s in sizes))


JSON_FILE_VERSION = 3  # src/util.cu


def lf(value: float) -> float:
    """jsonDouble prints "%lf": six decimals."""
    return round(value, 6)


def all_reduce_json(argv: Sequence[str], env: Sequence[str], code: int, ngpus: int, sizes: Sequence[int],
                    busbw_at: Callable[[int], float], ranks: int, first: Device, start: str, end: str,
                    warmup: int = 1, iters: int = 20) -> str:
    """The `-J` document (format version 3) of the same run, as src/util.cu's json writer emits
    it: one line, no spaces; booleans the strings "true"/"false", the average's okay "unchecked"
    without -G, root the "%6i" string, nwrong a double, doubles "%lf"; `devices` inside `config`
    with the one rank a single process parses from its device lines (parseRankInfo reads the
    first); start and end times "%Y-%m-%d %H:%M:%S"."""
    factor = 2 * (ranks - 1) / ranks if ranks > 1 else 1.0
    results, buses = [], []
    for size in sizes:
        bus = busbw_at(size)
        alg = bus / factor if ranks > 1 else bus
        t = size / (alg * 1e9) * 1e6 if alg > 0 else 0.0
        shown = bus if ranks > 1 else 0.0
        buses.append(shown)
        half = {"time": lf(t), "alg_bw": lf(alg), "bus_bw": lf(shown), "nwrong": 0.0}
        results.append({"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": f"{-1:6d}",
                        "out_of_place": half, "in_place": dict(half), "actual_iterations": iters,
                        "experiment_name": ""})
    doc = {"version": JSON_FILE_VERSION, "start_time": start, "args": list(argv), "env": list(env),
           "nccl_version": code,
           "config": {"nthreads": 1, "ngpus": ngpus, "minimum_bytes": sizes[0], "maximum_bytes": sizes[-1],
                      "step_factor": 2, "warmup_iters": warmup, "iterations": iters, "aggregated_iterations": 1,
                      "validation": 1, "graph": 0, "blocking_collectives": "false", "per_iter_timing": "false",
                      "per_iter_skip": 0, "parallel_init": "false",
                      "devices": [{"rank": first.rank, "group": 0, "pid": first.pid, "hostname": first.host,
                                   "device": first.device, "device_hex": f"{0:04x}:{first.bus:02x}:{0:02x}",
                                   "device_info": first.name}]},
           "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
           "average_bus_bandwidth": {"bandwidth": lf(sum(buses) / len(buses)), "okay": "unchecked"},
           "errors": [], "end_time": end}
    return dumps_c(doc)


def dumps_c(value: object) -> str:
    """JSON as util.cu's writer prints it: no spaces, doubles "%lf", ints "%d"."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dumps_c(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps_c(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:f}"
    return json.dumps(value)
