"""The simulator's acceptance-stage outputs, in the real tools' formats, with seeded faults.

Why real formats: the simulated stack must exercise the very parsers and checks a real rollout
uses, so fio, iperf3, ping, fabtests and the smoke job print here what they print on a
cluster (the shapes of tests/fixtures/real/: fio 3.33 JSON, iperf3 3.12 `-J`, iputils ping,
fabtests tables, the smoke job's result line under `srun -l`). Healthy figures come from the
plan and the catalog (the same floors the checks use, with a seeded margin above them); a
fault moves exactly what it names:
- `slow_storage`: the file system delivers this fraction of its modelled throughput;
- `bad_mgmt_nodes`: every pair touching these nodes gets a slow, lossy management link;
- `diverging_node`: the smoke rank on this node ends with different parameters.
"""

from __future__ import annotations

import json
import math
import random
import shlex
import zlib
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from gpufleet.catalog import InstanceType
from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import FileRecord, Manifest, write_bundle
from gpufleet.plan.storage import MB, TIB
from gpufleet.plan.model import StoragePlan
from gpufleet.spec import AcceptanceConfig, SimAcceptanceFaults, StorageConfig

FIO_VERSION = "fio-3.33"
PERCENTILES = ("1.000000", "5.000000", "10.000000", "20.000000", "30.000000", "40.000000", "50.000000",
               "60.000000", "70.000000", "80.000000", "90.000000", "95.000000", "99.000000", "99.500000",
               "99.900000", "99.950000", "99.990000")


@dataclass(frozen=True)
class AcceptanceFaults:
    slow_storage: float | None = None  # fraction of the modelled throughput the file system delivers
    bad_mgmt_nodes: frozenset[str] = field(default_factory=frozenset)
    diverging_node: str | None = None


def faults_from(cfg: SimAcceptanceFaults) -> AcceptanceFaults:
    """The stack's `gpufleet:simulator.acceptance` faults (their slots checked by the plan,
    SIM_FAULT_SLOT_UNKNOWN)."""
    return AcceptanceFaults(slow_storage=cfg.slow_storage, bad_mgmt_nodes=frozenset(cfg.bad_mgmt_nodes),
                            diverging_node=cfg.diverging_node)


# --- fio ------------------------------------------------------------------------------------

FIO_EPOCH = 1_784_016_000  # 2026-07-14 08:00:00 UTC: the simulated rollout's day (sim.clock.EPOCH)
LAT_US_BUCKETS = ("2", "4", "10", "20", "50", "100", "250", "500", "750", "1000")
LAT_MS_BUCKETS = ("2", "4", "10", "20", "50", "100", "250", "500", "750", "1000", "2000", ">=2000")
DEPTHS = ("1", "2", "4", "8", "16", "32", ">=64")
SUBMIT = ("0", "4", "8", "16", "32", "64", ">=64")
ZERO_STAT = {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}
SAMPLE_MS = 500  # fio's default bandwidth/IOPS log interval (log_avg_msec unset: every 500 ms)


def _latency_buckets(p50_ns: float, p99_ns: float, ios: int) -> dict[str, dict[str, float]]:
    """fio's latency_ns/us/ms histograms: the share of I/Os (percent) per bucket, from the same
    completion-latency percentiles the direction reports (half at p50, the tail spread to p99)."""
    shares = {"ns": dict.fromkeys(LAT_US_BUCKETS, 0.0), "us": dict.fromkeys(LAT_US_BUCKETS, 0.0),
              "ms": dict.fromkeys(LAT_MS_BUCKETS, 0.0)}
    if not ios:
        return shares

    def put(ns: float, share: float) -> None:
        if ns < 1000:
            unit, v = "ns", ns
        elif ns < 1e6:
            unit, v = "us", ns / 1e3
        else:
            unit, v = "ms", ns / 1e6
        for b in (LAT_MS_BUCKETS if unit == "ms" else LAT_US_BUCKETS):
            if b.startswith(">=") or v <= float(b):
                shares[unit][b] = round(shares[unit][b] + share, 6)
                return
        shares[unit][LAT_US_BUCKETS[-1]] = round(shares[unit][LAT_US_BUCKETS[-1]] + share, 6)

    for ns, share in ((p50_ns * 0.8, 50.0), (p50_ns * 1.2, 40.0), (p99_ns * 0.8, 9.0), (p99_ns * 1.2, 1.0)):
        put(ns, share)
    return shares


def _direction(io_bytes: int, seconds: float, block: int, p50_ns: float, p99_ns: float,
               slat_ns: float = 0.0) -> dict:
    """One direction of a job (fio 3.33 json: stat.c show_ddir_status), internally consistent:
    bw = io_bytes / runtime, iops = total_ios / runtime, lat = slat + clat, a bandwidth sample
    every 500 ms whose mean is the run's rate."""
    ios = io_bytes // block if block else 0
    runtime_ms = int(seconds * 1000) if ios else 0
    bw = int(io_bytes * 1000 / runtime_ms) if runtime_ms else 0
    steps = [p50_ns * f for f in (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0, 1.1, 1.2, 1.35)] + \
            [p99_ns * f for f in (0.6, 0.75, 1.0, 1.1, 1.2, 1.25, 1.3)]
    clat: dict[str, object] = dict(ZERO_STAT)
    lat: dict[str, object] = dict(ZERO_STAT)
    slat: dict[str, object] = dict(ZERO_STAT)
    if ios:
        clat = {"min": int(p50_ns * 0.5), "max": int(p99_ns * 1.4), "mean": round(p50_ns * 1.1, 6),
                "stddev": round(p50_ns * 0.3, 6), "N": ios,
                "percentile": {k: int(v) for k, v in zip(PERCENTILES, steps)}}
        if slat_ns:
            slat = {"min": int(slat_ns * 0.5), "max": int(slat_ns * 4), "mean": round(slat_ns, 6),
                    "stddev": round(slat_ns * 0.4, 6), "N": ios}
        lat = {"min": int(p50_ns * 0.5 + slat_ns * 0.5), "max": int(p99_ns * 1.4 + slat_ns * 4),
               "mean": round(p50_ns * 1.1 + slat_ns, 6), "stddev": round(p50_ns * 0.3, 6), "N": ios}
    samples = runtime_ms // SAMPLE_MS
    kib = bw / 1024
    iops = ios * 1000 / runtime_ms if runtime_ms else 0.0
    out = {"io_bytes": io_bytes, "io_kbytes": io_bytes // 1024, "bw_bytes": bw, "bw": bw // 1024,
           "iops": round(iops, 6), "runtime": runtime_ms, "total_ios": ios, "short_ios": 0, "drop_ios": 0,
           "slat_ns": slat, "clat_ns": clat, "lat_ns": lat,
           "bw_min": 0, "bw_max": 0, "bw_agg": 0.0, "bw_mean": 0.0, "bw_dev": 0.0, "bw_samples": 0,
           "iops_min": 0, "iops_max": 0, "iops_mean": 0.0, "iops_stddev": 0.0, "iops_samples": 0}
    if samples:
        out.update({"bw_min": int(kib * 0.9), "bw_max": int(kib * 1.1), "bw_agg": 100.0, "bw_mean": round(kib, 6),
                    "bw_dev": round(kib * 0.05, 6), "bw_samples": samples, "iops_min": int(iops * 0.9),
                    "iops_max": int(iops * 1.1), "iops_mean": round(iops, 6), "iops_stddev": round(iops * 0.05, 6),
                    "iops_samples": samples})
    return out


def fio_output(name: str, jobs: int, rw: str, bytes_per_job: int, seconds: float, block: int,
               p50_ns: float = 2e5, p99_ns: float = 2e6, options: dict[str, str] | None = None,
               started: int = FIO_EPOCH, iodepth: int = 1) -> str:
    """fio 3.33 `--output-format=json` for `jobs` identical jobs of one read or write test, with
    every block the real capture has (tests/fixtures/real/fio_*__fio3.33__captured.json): job
    options as given on the command line, sync, iodepth_*, latency_ns/us/ms and the latency
    target keys, the run's timestamps."""
    empty = _direction(0, 0, block, 0, 0)
    slat = 2_000.0 if iodepth > 1 else 0.0  # an async engine's submission latency; psync has none
    moved = _direction(bytes_per_job, seconds, block, p50_ns, p99_ns, slat)
    opts = {"name": name, "rw": rw, "bs": fab_size_str(block).upper() if block >= 1024 else str(block),
            "numjobs": str(jobs), **(options or {})}
    buckets = _latency_buckets(p50_ns, p99_ns, moved["total_ios"])
    depth = "16" if iodepth >= 16 else str(iodepth) if str(iodepth) in DEPTHS else ">=64"
    submit = "16" if iodepth >= 16 else "4"
    entries = [{"jobname": name, "groupid": 0, "error": 0, "eta": 2147483647, "elapsed": max(1, round(seconds)),
                "job options": opts,
                "read": moved if rw in ("read", "randread") else empty,
                "write": moved if rw == "write" else empty, "trim": empty,
                "sync": {"total_ios": 0, "lat_ns": dict(ZERO_STAT)},
                "job_runtime": int(seconds * 1000), "usr_cpu": 1.0, "sys_cpu": 5.0, "ctx": 100, "majf": 0, "minf": 20,
                "iodepth_level": {k: (100.0 if k == depth else 0.0) for k in DEPTHS},
                "iodepth_submit": {k: (100.0 if k == submit else 0.0) for k in SUBMIT},
                "iodepth_complete": {k: (100.0 if k == submit else 0.0) for k in SUBMIT},
                "latency_ns": buckets["ns"], "latency_us": buckets["us"], "latency_ms": buckets["ms"],
                "latency_depth": iodepth, "latency_target": 0, "latency_percentile": 100.0, "latency_window": 0}
               for _ in range(jobs)]
    ended = started + max(1, round(seconds))
    at = datetime.fromtimestamp(ended, timezone.utc)
    when = f"{at:%a %b} {at.day:2d} {at:%H:%M:%S %Y}"  # ctime(3), as fio prints "time"
    return json.dumps({"fio version": FIO_VERSION, "timestamp": ended, "timestamp_ms": ended * 1000, "time": when,
                       "jobs": entries}, indent=2)


def _options(argv: Sequence[str]) -> dict[str, str]:
    """`--key=value` of a fio command line as fio echoes them under "job options" (not the
    global ones it reports apart: output format)."""
    out = {}
    for a in argv:
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            if k not in ("output-format",):
                out[k] = v
    return out


def storage_outputs(storage: StorageConfig, plan: StoragePlan, instance: InstanceType, cfg: AcceptanceConfig,
                    rng: random.Random, faults: AcceptanceFaults = AcceptanceFaults(),
                    clients: int | None = None, mount: str = "/fsx/gpufleet-acceptance") -> dict[str, str]:
    """What the storage collector puts in the bundle: each client runs each test with one job
    (its own directory; the checkpoint's shards split over the clients), and the clients' fio
    documents are merged as rollout/acceptance_collect.py merges them (parsers.fio.merge_outputs).
    `clients`: how many run fio (the stage's nodes), default `storageClients`."""
    from gpufleet.gates.parsers.fio import merge_outputs

    clients = clients or cfg.storage_clients
    share = faults.slow_storage if faults.slow_storage is not None else rng.uniform(0.9, 1.0)
    mbs = A.expected_storage_mbs(plan, instance, clients) * share
    size = 4 * 2**30
    per_client_s = size / (mbs * MB / clients)
    ckpt = int(storage.checkpoint_tib * TIB)
    shards = max(1, cfg.checkpoint_shards // clients)
    ckpt_rate = min(plan.aggregate_throughput_mbs, plan.client_throughput_mbs) * share * MB
    md_ops = cfg.metadata_min_ops * (rng.uniform(2, 4) if faults.slow_storage is None else 0.5)
    iops = cfg.random_read_min_iops * rng.uniform(3, 6)
    md_files = 2000
    read_s = per_client_s * rng.uniform(0.85, 0.95)
    out: dict[str, list[str]] = {}
    for c in range(clients):
        argv = {k: _options(v) for k, v in A.fio_commands(f"{mount}/client{c:04d}", 1, ckpt // clients, shards,
                                                             metadata_files=md_files).items()}
        md = lambda name, f: fio_output(name, 1, "read", 4096 * md_files, md_files / (md_ops / clients), 4096,
                                        options=argv[f])
        docs = {
            A.FIO_SEQ_WRITE: fio_output("seqwrite", 1, "write", size, per_client_s, 2**20, options=argv[A.FIO_SEQ_WRITE]),
            A.FIO_SEQ_READ: fio_output("seqwrite", 1, "read", size, read_s, 2**20, options=argv[A.FIO_SEQ_READ]),
            A.FIO_RAND_READ: fio_output("seqwrite", 1, "randread", 4096 * int(iops * 60 / clients), 60, 4096,
                                        p50_ns=4e5, p99_ns=cfg.random_read_p99_max_ms * 1e6 * 0.3,
                                        options=argv[A.FIO_RAND_READ], iodepth=16),
            A.FIO_MD_CREATE: md("md", A.FIO_MD_CREATE), A.FIO_MD_STAT: md("md", A.FIO_MD_STAT),
            A.FIO_MD_DELETE: md("md", A.FIO_MD_DELETE),
            A.FIO_CHECKPOINT: fio_output("checkpoint", shards, "write", ckpt // clients // shards,
                                         ckpt / ckpt_rate if ckpt_rate else 0, 4 * 2**20,
                                         options=argv[A.FIO_CHECKPOINT]),
        }
        for name, text in docs.items():
            out.setdefault(name, []).append(text)
    return {name: merge_outputs(texts) for name, texts in out.items()}


# --- network --------------------------------------------------------------------------------

def iperf3_output(client: str, server: str, bps: float, retransmits: int, streams: int = 8,
                  seconds: float = 10.0, port: int = 5201, started: int = FIO_EPOCH) -> str:
    """iperf3 3.12 `-J` for a client -> server TCP test over `streams` parallel streams, with
    every key of the real capture (tests/fixtures/real/iperf3_J_tcp_loopback__iperf3.12__captured.json):
    start's timestamp, cookie, buffer sizes; one interval a second, its per-stream rows and sum;
    the end's streams, whose bytes add up to sum_sent and sum_received, bits_per_second =
    bytes x 8 / seconds everywhere."""
    per_bytes = int(bps / streams * seconds / 8)
    per_retx = [retransmits // streams + (1 if i < retransmits % streams else 0) for i in range(streams)]
    ticks = max(1, int(seconds))
    intervals = []
    for t in range(ticks):
        start, end = float(t), float(t + 1) if t + 1 < ticks else seconds
        chunk = per_bytes // ticks + (per_bytes % ticks if t == ticks - 1 else 0)
        rows = [{"socket": 5 + i, "start": start, "end": end, "seconds": end - start, "bytes": chunk,
                 "bits_per_second": chunk * 8 / (end - start), "retransmits": per_retx[i] // ticks
                 + (per_retx[i] % ticks if t == ticks - 1 else 0), "snd_cwnd": 3_000_000, "snd_wnd": 29_561_856,
                 "rtt": 120, "rttvar": 40, "pmtu": 9001, "omitted": False, "sender": True} for i in range(streams)]
        total = sum(r["bytes"] for r in rows)
        intervals.append({"streams": rows, "sum": {"start": start, "end": end, "seconds": end - start, "bytes": total,
                                                   "bits_per_second": total * 8 / (end - start),
                                                   "retransmits": sum(r["retransmits"] for r in rows),
                                                   "omitted": False, "sender": True}})
    received_end = seconds + 0.015  # the receiver's side closes a little later (real capture: +0.015 s)
    stream = lambda i: {
        "sender": {"socket": 5 + i, "start": 0, "end": seconds, "seconds": seconds, "bytes": per_bytes,
                   "bits_per_second": per_bytes * 8 / seconds, "retransmits": per_retx[i], "max_snd_cwnd": 3_000_000,
                   "max_snd_wnd": 32_965_632, "max_rtt": 300, "min_rtt": 60, "mean_rtt": 120, "sender": True},
        "receiver": {"socket": 5 + i, "start": 0, "end": received_end, "seconds": seconds, "bytes": per_bytes,
                     "bits_per_second": per_bytes * 8 / received_end, "sender": True}}
    total = per_bytes * streams
    at = datetime.fromtimestamp(started, timezone.utc)
    return json.dumps({
        "start": {"connected": [{"socket": 5 + i, "local_host": client, "local_port": 40000 + i, "remote_host": server,
                                 "remote_port": port} for i in range(streams)],
                  "version": "iperf 3.12", "system_info": "Linux gpufleet-sim 6.1.141-155.222.amzn2023.x86_64 #1 SMP "
                  "x86_64", "timestamp": {"time": f"{at:%a, %d %b %Y %H:%M:%S} GMT", "timesecs": started},
                  "connecting_to": {"host": server, "port": port},
                  "cookie": f"{zlib.crc32(f'{client}>{server}'.encode()):08x}" + "q" * 28,
                  "tcp_mss_default": 8949, "target_bitrate": 0, "sock_bufsize": 0, "sndbuf_actual": 16384,
                  "rcvbuf_actual": 131072,
                  "test_start": {"protocol": "TCP", "num_streams": streams, "blksize": 131072, "omit": 0,
                                 "duration": int(seconds), "bytes": 0, "blocks": 0, "reverse": 0, "tos": 0,
                                 "target_bitrate": 0}},
        "intervals": intervals,
        "end": {"streams": [stream(i) for i in range(streams)],
                "sum_sent": {"start": 0, "end": seconds, "seconds": seconds, "bytes": total,
                             "bits_per_second": total * 8 / seconds, "retransmits": sum(per_retx), "sender": True},
                "sum_received": {"start": 0, "end": received_end, "seconds": received_end, "bytes": total,
                                 "bits_per_second": total * 8 / received_end, "sender": True},
                "cpu_utilization_percent": {"host_total": 20.0, "host_user": 1.0, "host_system": 19.0,
                                            "remote_total": 25.0, "remote_user": 1.0, "remote_system": 24.0},
                "sender_tcp_congestion": "cubic", "receiver_tcp_congestion": "cubic"}}, indent="\t")


PING_INTERVAL_MS = 200  # the collector's `ping -c 20 -i 0.2`
PING_OVERHEAD_MS = 17  # elapsed beyond (count - 1) intervals: 17-32 ms in the real captures


def ping_output(address: str, rtts_ms: Sequence[float | None]) -> str:
    """iputils 20221126 ping (ping/ping_common.c finish): one reply line per answered packet, then
    the summary. Round trips are whole microseconds and the summary is integer arithmetic as
    iputils does it (avg = tsum / n truncated, mdev = llsqrt((tsum2 - tsum^2 / n) / n)), the loss
    `%g%%`, the elapsed time (count - 1) intervals and the last reply; no reply at all ends in a
    blank line instead of the rtt line (tests/fixtures/real/ping_c*__iputils20221126__captured.txt)."""
    lines = [f"PING {address} ({address}) 56(84) bytes of data."]
    got = [round(r * 1000) for r in rtts_ms if r is not None]  # microseconds
    for seq, rtt in enumerate(rtts_ms, 1):
        if rtt is not None:
            us = round(rtt * 1000)
            lines.append(f"64 bytes from {address}: icmp_seq={seq} ttl=64 time={us // 1000}.{us % 1000:03d} ms")
    n, r = len(rtts_ms), len(got)
    loss = f"{100.0 * (n - r) / n:g}" if n else "0"
    lines += ["", f"--- {address} ping statistics ---",
              f"{n} packets transmitted, {r} received, {loss}% packet loss, "
              f"time {max(0, n - 1) * PING_INTERVAL_MS + PING_OVERHEAD_MS}ms"]
    if got:
        tsum, tsum2 = sum(got), sum(x * x for x in got)
        avg, mdev = tsum // r, math.isqrt((tsum2 - tsum * tsum // r) // r)
        ms = lambda us: f"{us // 1000}.{us % 1000:03d}"  # noqa: E731
        lines.append(f"rtt min/avg/max/mdev = {ms(min(got))}/{ms(avg)}/{ms(max(got))}/{ms(mdev)} ms")
    else:
        lines.append("")
    return "\n".join(lines) + "\n"


def fab_size_str(size: int) -> str:
    """fabtests' size_str (util/pingpong.c, fabtests/common/shared.c): binary magnitudes, one
    truncated decimal below 10 (2,000,000 B is "1.9m", never a rounded "2.0m")."""
    for mag, base in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size >= base:
            break
    else:
        mag, base = "", 1
    fraction = (size % base) * 10 // base if size // base < 10 else 0
    return f"{size // base}.{fraction}{mag}" if fraction else f"{size // base}{mag}"


def fab_cnt_str(count: int) -> str:
    """fabtests' cnt_str: decimal magnitudes, truncated ("1k" is 1000 and 1999)."""
    for mag, base in (("b", 10**9), ("m", 10**6), ("k", 10**3)):
        if count >= base:
            return f"{count // base}{mag}"
    return str(count)


PINGPONG_DEFAULT_ITERS = 10  # util/pingpong.c: .iterations = 10 (the collector passes no -I)
PINGPONG_MAX_MSG = (1 << 22) + (1 << 21)  # PP_MAX_DATA_MSG: the largest size `-S all` runs
# the first row's one-off connection set-up, in elapsed time: the real EFA capture's 64 B row took
# 0.03 s for 10 ping-pongs (1362.35 us per transfer, 20 transfers), 17-20 us a transfer after it
PINGPONG_SETUP_US = 27_000.0


def pingpong_sizes() -> list[int]:
    """`fi_pingpong -S all`: 0, 1, then each power of two and the half-way size above it up to
    PP_MAX_DATA_MSG (util/pingpong.c, generate_test_sizes)."""
    sizes = [0, 1]
    for i in range(1, 32):
        p2 = 1 << i
        if p2 > PINGPONG_MAX_MSG:
            break
        sizes.append(p2)
        if p2 + p2 // 2 > PINGPONG_MAX_MSG:
            break
        sizes.append(p2 + p2 // 2)
    return sizes


def pingpong_output(latency_us: float, peak_mbs: float, iters: int = PINGPONG_DEFAULT_ITERS,
                    sizes: Sequence[int] | None = None, setup_us: float = PINGPONG_SETUP_US) -> str:
    """fi_pingpong's table as util/pingpong.c show_perf prints it (libfabric main, ofiwg/libfabric):
    header `%-8s%-8s%-9s%-8s%8s %10s%13s%13s`, rows `%-8s%-8s=%-8s%-8s%8.2fs%10.2f%11.2f%11.2f`;
    bytes = sent x size x 2 (ping and pong), time the elapsed seconds of all of them, usec/xfer
    elapsed / sent / 2. The first size carries the connection set-up, as on the real EFA capture
    (tests/fixtures/real/fi_pingpong_efa_test_sh__aws_cdi_sdk_install_guide.txt: 1362 us at 64 B,
    17-20 us after)."""
    rows = [f"{'bytes':<8}{'#sent':<8}{'#ack':<9}{'total':<8}{'time':>8} {'MB/sec':>10}{'usec/xfer':>13}"
            f"{'Mxfers/sec':>13}"]
    for k, size in enumerate(sizes if sizes is not None else pingpong_sizes()):
        usec = latency_us + size / peak_mbs + (setup_us / (2 * iters) if k == 0 else 0.0)  # MB/s = bytes/us
        elapsed_us = int(usec * iters * 2)
        total = iters * size * 2
        rows.append(f"{fab_size_str(size):<8}{fab_cnt_str(iters):<8}={fab_cnt_str(iters):<8}{fab_size_str(total):<8}"
                    f"{elapsed_us / 1e6:8.2f}s{total / elapsed_us:10.2f}{elapsed_us / iters / 2:11.2f}"
                    f"{iters * 2 / elapsed_us:11.2f}")
    return "\n".join(rows) + "\n"


RMA_BW_SIZES = (64, 256, 1024, 4096, 65536, 1 << 20)  # FT_DEFAULT_SIZE entries of def_test_sizes (shared.c)


def rma_iterations(size: int) -> int:
    """fabtests/common/shared.c size_to_count with FT_OPT_BW (a bandwidth test)."""
    return 200 if size >= 1 << 20 else 2000 if size >= 1 << 16 else 20000


def rma_bw_output(peak_mbs: float, latency_us: float = 15.0, iters: int | None = None) -> str:
    """fi_rma_bw -o write's table. NO REAL CAPTURE exists in tests/fixtures/real (SOURCES.md); the
    format follows fabtests/common/shared.c show_perf (libfabric main): header
    `%-8s%-8s%-8s%8s %10s%13s%13s`, rows `%-8s%-8s%-8s%8.2fs%10.2f%11.2f%11.2f`, one transfer per
    iteration (benchmark_shared.c bandwidth_rma), the default sizes and their iteration counts
    (size_to_count) unless `-I` sets `iters`.
    A window of transfers is in flight, so latency is paid once per window of 64, not per write."""
    rows = [f"{'bytes':<8}{'iters':<8}{'total':<8}{'time':>8} {'MB/sec':>10}{'usec/xfer':>13}{'Mxfers/sec':>13}"]
    for size in RMA_BW_SIZES:
        n = iters or rma_iterations(size)
        usec = size / peak_mbs + latency_us / 64
        elapsed_us = max(1, int(usec * n))
        total = n * size
        rows.append(f"{fab_size_str(size):<8}{fab_cnt_str(n):<8}{fab_size_str(total):<8}{elapsed_us / 1e6:8.2f}s"
                    f"{total / elapsed_us:10.2f}{elapsed_us / n:11.2f}{n / elapsed_us:11.2f}")
    return "\n".join(rows) + "\n"


FABRIC_ITERATIONS = 1000  # the collector's -I (rollout/acceptance_collect.py NetworkTools.fabric_iterations)


def network_outputs(pairs: Sequence[tuple[str, str]], addresses: Mapping[str, str], instance: InstanceType,
                    cfg: AcceptanceConfig, rng: random.Random,
                    faults: AcceptanceFaults = AcceptanceFaults()) -> dict[str, str]:
    out: dict[str, str] = {}
    for a, b in pairs:
        bad = a in faults.bad_mgmt_nodes or b in faults.bad_mgmt_nodes
        files = A.pair_files(a, b)
        card_bps = instance.card_gbps * 1e9
        bps = card_bps * (0.05 if bad else rng.uniform(0.85, 0.95))
        out[files["iperf3"]] = iperf3_output(addresses[a], addresses[b], bps, 40_000 if bad else rng.randint(0, 50))
        rtts = [None if bad and i % 5 == 0 else rng.uniform(0.04, 0.09) * (20 if bad else 1) for i in range(20)]
        out[files["ping"]] = ping_output(addresses[b], rtts)
        line_mbs = instance.card_gbps * 1000 / 8
        out[files["pingpong"]] = pingpong_output(rng.uniform(14, 19), line_mbs * 0.6, iters=FABRIC_ITERATIONS)
        out[files["rma_bw"]] = rma_bw_output(line_mbs * rng.uniform(0.9, 0.97), iters=FABRIC_ITERATIONS)
    return out


# --- training smoke ----------------------------------------------------------------------------

def smoke_output(hosts: Sequence[str], steps: int, rng: random.Random, samples_per_second: float,
                 faults: AcceptanceFaults = AcceptanceFaults()) -> str:
    """What `srun -l ... train_smoke.py` prints: rank-prefixed lines, rank 0's one result line."""
    loss0 = rng.uniform(30, 60)
    losses = [round(loss0 * (0.85 ** s) + 0.2, 6) for s in range(steps)]
    checksum = rng.uniform(-10, 10)
    checksums = [checksum + (0.37 if h == faults.diverging_node else 0.0) for h in hosts]
    doc = {"gpufleet_smoke": 1, "world_size": len(hosts), "backend": "nccl", "steps": steps, "loss": losses,
           "samples_per_second": round(samples_per_second, 1),
           "allreduce_ms": [round(rng.uniform(0.2, 0.6), 3) for _ in range(steps)],
           "data_loading_share": round(rng.uniform(0.02, 0.08), 4),
           "ranks_agree": len(set(checksums)) == 1, "checksums": checksums, "hosts": list(hosts)}
    return f"0: {json.dumps(doc)}\n"


class SimAcceptanceCollector:
    """Writes each acceptance stage's bundle as the real collectors would, from the outputs above."""

    def __init__(self, storage: StorageConfig, plan: StoragePlan, instance: InstanceType, cfg: AcceptanceConfig,
                 seed: int, faults: AcceptanceFaults = AcceptanceFaults()) -> None:
        self.storage, self.plan, self.instance, self.cfg = storage, plan, instance, cfg
        self.seed, self.faults = seed, faults

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        rng = random.Random(f"{self.seed}:{stage}")
        if stage == "storage":
            clients = len(nodes) or self.cfg.storage_clients
            files = storage_outputs(self.storage, self.plan, self.instance, self.cfg, rng, self.faults,
                                    clients=clients, mount=self.storage_mount)
            ckpt = int(self.storage.checkpoint_tib * TIB)
            first = f"{self.storage_mount}/{nodes[0] if nodes else 'client0000'}"
            commands = {name: f"on {clients} clients at once: {shlex.join(argv)}" for name, argv in A.fio_commands(
                first, 1, ckpt // clients, max(1, self.cfg.checkpoint_shards // clients)).items()}
        elif stage == "network":
            addresses = {n: f"10.0.{i // 250}.{i % 250 + 4}" for i, n in enumerate(nodes)}
            files = network_outputs(pairs, addresses, self.instance, self.cfg, rng, self.faults)
            commands = {}
            for a, b in pairs:
                f = A.pair_files(a, b)
                fab = f"-p efa -e rdm -I {FABRIC_ITERATIONS}"  # as rollout/acceptance_collect.py network_commands
                commands.update({f["iperf3"]: f"iperf3 -c {addresses[b]} -p 5201 -t 10 -P 8 -J",
                                 f["ping"]: f"ping -c 20 -i 0.2 {addresses[b]}",
                                 f["pingpong"]: f"fi_pingpong {fab} -S all {addresses[b]}",
                                 f["rma_bw"]: f"fi_rma_bw {fab} -o write {addresses[b]}"})
        elif stage == "smoke":
            hosts = [n for n in nodes for _ in range(self.instance.gpus)]
            floor = A.smoke_floor(self.instance, len(hosts), self.cfg) or 1000.0
            files = {A.TRAIN_SMOKE: smoke_output(hosts, self.cfg.smoke_steps, rng, floor * rng.uniform(1.3, 1.8),
                                                 self.faults)}
            commands = {A.TRAIN_SMOKE: f"srun -l --nodes={len(nodes)} python {A.SMOKE_SCRIPT}"}
        else:
            raise ValueError(f"unknown acceptance stage {stage!r}")
        manifest = Manifest(slot=f"acceptance-{stage}", collected_by="sim",
                            files={name: FileRecord(command=commands.get(name, ""), exit_code=0) for name in files})
        return write_bundle(out, files, manifest)

    def seconds(self, stage: str) -> float:
        """The stage's modelled wall time (`stage_seconds`), journaled with its verdict."""
        return stage_seconds(self.storage, self.plan, self.instance, self.cfg, self.seed, self.faults)[stage]

    @property
    def storage_mount(self) -> str:
        return f"{self.storage.mount_path.rstrip('/')}/gpufleet-acceptance"


# --- modelled durations (bench/bench_acceptance.py; derived from the outputs above) ----------

COMMAND_OVERHEAD_S = 5.0  # starting one command on the nodes (srun / ssh), each
SMOKE_STARTUP_S = 60.0  # container start, torch import, NCCL init (measured here: 30-60 s on CPU)
PING_INTERVAL_S = 0.2


def stage_seconds(storage: StorageConfig, plan: StoragePlan, instance: InstanceType, cfg: AcceptanceConfig,
                  seed: int = 0, faults: AcceptanceFaults = AcceptanceFaults()) -> dict[str, float]:
    """Modelled wall time of each acceptance stage: what its tools report they ran for.

    The fio tests run one after the other (they share the file system); the network pairs run
    in parallel, a block's pairs one after another (they share the block's nodes); the smoke
    job's steps at its samples per second, after its start-up.
    """
    from gpufleet.gates.parsers import fio as fio_parser, iperf3 as iperf3_parser

    rng = random.Random(seed)
    files = storage_outputs(storage, plan, instance, cfg, rng, faults)
    storage_s = 0.0
    for name, text in files.items():
        run = fio_parser.parse_json(text)
        storage_s += max(run.runtime_s("read"), run.runtime_s("write")) + COMMAND_OVERHEAD_S
    pair = network_outputs([("a", "b")], {"a": "10.0.0.1", "b": "10.0.0.2"}, instance, cfg, rng)
    f = A.pair_files("a", "b")
    per_pair = (iperf3_parser.parse_json(pair[f["iperf3"]]).seconds or 0) + 20 * PING_INTERVAL_S
    for name in (f["pingpong"], f["rma_bw"]):  # the tables' `time` column: the run's own measure
        per_pair += sum(float(line.split()[-4].rstrip("s")) for line in pair[name].splitlines()[1:])
    network_s = cfg.efa_pairs_per_block * (per_pair + 4 * COMMAND_OVERHEAD_S)
    ranks = cfg.smoke_nodes * instance.gpus
    floor = A.smoke_floor(instance, ranks, cfg) or 1000.0
    smoke_s = SMOKE_STARTUP_S + cfg.smoke_steps * ranks * 64 / (floor * 1.5) + COMMAND_OVERHEAD_S
    return {"storage": round(storage_s, 1), "network": round(network_s, 1), "smoke": round(smoke_s, 1)}
