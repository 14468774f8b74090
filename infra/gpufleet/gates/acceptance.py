"""Checks of the acceptance stages: storage and network base checks and the training smoke job.

The image pre-pull is judged per node, in the preflight gates (infra/gpufleet/gates/image.py).

Why one module beside checks/: these stages judge the stack (a file system, a management
network, a fabric sample, a job across nodes), not one node's preflight, yet they speak the same
language (a bundle in, CheckResults with taint-safe reason codes out), so the rollout journals
and reports them like any gate. Pure: the bundle is already in memory.

Floors and where they come from:
- Storage throughput: the plan's modelled throughput for the file system's size and tier
  (infra/gpufleet/plan/storage.py, FSx for Lustre per-TiB tiers) as seen by the clients that ran fio,
  min(file system aggregate, clients x client bandwidth), times `storageMinShare`.
- Checkpoint rehearsal: one checkpoint of the plan's size (`storage.checkpointTib`) written in
  parallel shards within `storage.targetCheckpointWriteSeconds`.
- Management TCP: `mgmtTcpMinShare` of one network card's line rate (catalog `card_gbps`,
  [ec2-types] NetworkInfo.NetworkCards[].PeakBandwidthInGbps), measured with parallel streams
  (EC2 caps one TCP flow at 5 Gbps outside and 10 Gbps inside a cluster placement group:
  "Amazon EC2 instance network bandwidth", EC2 User Guide), so iperf3 runs `-P 8`.
- Management RTT and loss: `mgmtRttMaxMs`/`mgmtLossMaxPercent`, gpufleet's judgement for one
  placement group (AWS publishes no per-type RTT).
- EFA point to point: `fi_rma_bw` at the largest size against `efaBwMinShare` of one EFA card's
  line rate (catalog `card_gbps`; one libfabric domain is one device); `fi_pingpong` usec/xfer,
  the least over the small sizes (<= 4 KiB), under `efaLatencyMaxUs` (no AWS source publishes an
  expected fi_pingpong figure; captured efa_test.sh runs show 8-24 us, tests/fixtures/real/SOURCES.md).
  The table's first row carries the one-off connection set-up (1-2 ms: the real efa_test.sh
  capture reads 1362 us at 64 B, 10 iterations, then 17-20 us): it counts only when enough
  iterations amortise that set-up; a table with no small row to judge is a retest, not a fault.
- Training smoke: the loss falls to `smokeLossFactor` of its first value, every rank holds the
  same parameters, samples/s at least `smokeMinSamplesPerSecond` or the per-GPU floor below.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from gpufleet.catalog import InstanceType
from gpufleet.gates.bundle import Bundle
from gpufleet.gates.launch import LaunchSpec
from gpufleet.gates.parsers import fabtests, fio, iperf3, ping, train
from gpufleet.gates.parsers.common import absent_command, missing_tool
from gpufleet.gates.verdict import CheckResult, Verdict, check_result, not_collected, worst
from gpufleet.plan.model import StoragePlan
from gpufleet.plan.storage import MB, TIB, client_mbs
from gpufleet.spec import AcceptanceConfig, StorageConfig

P, W, R, Q = Verdict.PASS, Verdict.WARN, Verdict.REMEDIATE, Verdict.QUARANTINE
REF = "DESIGN.md section 6 (acceptance stages); infra/gpufleet/gates/acceptance.py"

# --- bundle file names (one stage bundle each; BUNDLE.md "Acceptance bundles") --------------
FIO_SEQ_WRITE = "fio-seq-write.json"
FIO_SEQ_READ = "fio-seq-read.json"
FIO_RAND_READ = "fio-rand-read.json"
FIO_MD_CREATE = "fio-md-create.json"
FIO_MD_STAT = "fio-md-stat.json"
FIO_MD_DELETE = "fio-md-delete.json"
FIO_CHECKPOINT = "fio-checkpoint.json"
STORAGE_FILES = (FIO_SEQ_WRITE, FIO_SEQ_READ, FIO_RAND_READ, FIO_MD_CREATE, FIO_MD_STAT, FIO_MD_DELETE,
                 FIO_CHECKPOINT)
TRAIN_SMOKE = "train-smoke.txt"

# Samples per second per GPU the smoke model must reach (its batches are tiny, so the figure is a
# sanity floor catching a rank 10x off, not a benchmark). gpufleet's judgement: no published figure.
SMOKE_SAMPLES_PER_SECOND_PER_GPU = {"A100": 2_000.0, "H100": 4_000.0, "H200": 4_000.0}


def pair_files(a: str, b: str) -> dict[str, str]:
    """File names of one node pair's network tests (client `a` against server `b`)."""
    key = f"{a}--{b}"
    return {"iperf3": f"iperf3-{key}.json", "ping": f"ping-{key}.txt", "pingpong": f"fi_pingpong-{key}.txt",
            "rma_bw": f"fi_rma_bw-{key}.txt"}


def _r(check_id: str, measured: object, expected: object, verdict: Verdict, code: str | None,
       message: str = "") -> CheckResult:
    return check_result(check_id, "Q", str(measured), str(expected), verdict,
                        code[:63] if verdict is not P and code else None, message if verdict is not P else "", REF)


def _missing(check_id: str, expected: object, name: str) -> CheckResult:
    return not_collected(check_id, "Q", expected, name, REF)


def _fio(bundle: Bundle, check_id: str, name: str, expected: object) -> fio.FioRun | CheckResult:
    f = bundle.get(name)
    if not f.collected:
        return _missing(check_id, expected, name)
    if (absent := _absent(check_id, str(expected), f.text, f.exit_code, name)) is not None:
        return absent
    run = fio.parse_json(f.text)
    if run.failed_jobs:  # fio's own error count: the file system refused the I/O
        why = ", ".join(f"{j.name}: error {j.error}" for j in run.failed_jobs)
        return _r(check_id, f"fio failed: {why}", expected, Q, "fio-failed", f"{name}: {why}")
    if run.problems:  # not fio's document: says nothing about the file system
        why = "; ".join(run.problems)
        return _r(check_id, f"unreadable: {why}"[:300], expected, R, "fio-unreadable",
                  f"{name}: unreadable / tool failed: retest ({why})")
    return run


# --- the commands that fill a storage bundle (preflight collectors and tests run these) -----

def fio_commands(directory: str, jobs: int, checkpoint_bytes: int, shards: int, size: str = "4G",
                 runtime_s: int = 60, metadata_files: int = 2000) -> dict[str, list[str]]:
    """fio argv per storage bundle file, for one client running `jobs` jobs in `directory`.

    Direct I/O so the page cache does not stand in for the file system; large blocks for the
    sequential tests, 4 KiB at queue depth 16 for random reads; the metadata engines create,
    stat and remove the same `md.<job>.<file>` files; the checkpoint writes `checkpoint_bytes` in `shards`
    parallel files (one fio job each) and ends with an fsync, as a checkpoint writer must.
    """
    base = ["fio", f"--directory={directory}", "--output-format=json", "--group_reporting=0"]
    seq = [*base, "--bs=1M", "--direct=1", "--ioengine=psync", f"--size={size}", f"--numjobs={jobs}"]
    md = [*base, f"--nrfiles={metadata_files}", "--filesize=4k", "--openfiles=1", "--filename_format=md.$jobnum.$filenum",
          f"--numjobs={jobs}"]
    shard = max(1, checkpoint_bytes // shards)
    return {
        FIO_SEQ_WRITE: [*seq, "--name=seqwrite", "--rw=write", "--end_fsync=1"],
        FIO_SEQ_READ: [*seq, "--name=seqwrite", "--rw=read"],  # reads the files seqwrite laid out
        FIO_RAND_READ: [*base, "--name=seqwrite", "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=libaio",
                        "--iodepth=16", f"--size={size}", f"--numjobs={jobs}", f"--runtime={runtime_s}",
                        "--time_based=0"],
        FIO_MD_CREATE: [*md, "--name=md", "--ioengine=filecreate", "--create_on_open=1", "--fallocate=none"],
        FIO_MD_STAT: [*md, "--name=md", "--ioengine=filestat"],
        FIO_MD_DELETE: [*md, "--name=md", "--ioengine=filedelete"],
        FIO_CHECKPOINT: [*base, "--name=checkpoint", "--rw=write", "--bs=4M", "--direct=1", "--ioengine=psync",
                         f"--size={shard}", f"--numjobs={shards}", "--end_fsync=1"],
    }


# --- storage base check --------------------------------------------------------------------

def expected_storage_mbs(plan: StoragePlan, instance: InstanceType, clients: int,
                         per_client_mbs: int | None = None) -> int:
    """What `clients` fio clients can draw from the file system the plan sized: each one a GPU
    node of `instance`, or a dedicated storage client of `per_client_mbs` (a Pulumi stack's)."""
    each = per_client_mbs if per_client_mbs is not None else client_mbs(instance, plan.efa_enabled)
    return min(plan.aggregate_throughput_mbs, clients * each)


def storage_checks(bundle: Bundle, storage: StorageConfig, plan: StoragePlan, instance: InstanceType,
                   cfg: AcceptanceConfig, clients: int | None = None,
                   per_client_mbs: int | None = None) -> list[CheckResult]:
    """`clients`: how many ran fio (default `storageClients`); `per_client_mbs`: their bandwidth
    when they are dedicated storage clients rather than GPU nodes of `instance`."""
    count = clients if clients is not None else cfg.storage_clients
    floor = expected_storage_mbs(plan, instance, count, per_client_mbs) * cfg.storage_min_share
    out: list[CheckResult] = []
    for check_id, name, direction in (("storage.seq-write", FIO_SEQ_WRITE, "write"),
                                      ("storage.seq-read", FIO_SEQ_READ, "read")):
        expected = f">= {floor:.0f} MB/s ({cfg.storage_min_share:g} x modelled)"
        run = _fio(bundle, check_id, name, expected)
        if isinstance(run, CheckResult):
            out.append(run)
            continue
        mbs = run.bw_bytes(direction) / MB
        out.append(_r(check_id, f"{mbs:.0f} MB/s over {len(run.jobs)} clients", expected,
                      P if mbs >= floor else Q, f"storage-{direction}-slow",
                      f"sequential {direction} {mbs:.0f} MB/s is under {floor:.0f} MB/s"))
    out.append(_random_read(bundle, cfg))
    out.append(_metadata(bundle, cfg))
    out.append(_checkpoint(bundle, storage))
    return out


def _random_read(bundle: Bundle, cfg: AcceptanceConfig) -> CheckResult:
    expected = f">= {cfg.random_read_min_iops:g} IOPS, p99 <= {cfg.random_read_p99_max_ms:g} ms"
    run = _fio(bundle, "storage.random-read", FIO_RAND_READ, expected)
    if isinstance(run, CheckResult):
        return run
    iops, p99 = run.iops("read"), run.clat_p99_ns("read")
    p99_ms = p99 / 1e6 if p99 is not None else None
    measured = f"{iops:.0f} IOPS, p99 {p99_ms:.2f} ms" if p99_ms is not None else f"{iops:.0f} IOPS"
    if iops < cfg.random_read_min_iops:
        return _r("storage.random-read", measured, expected, Q, "storage-randread-slow",
                  f"random 4 KiB reads at {iops:.0f} IOPS, under {cfg.random_read_min_iops:g}")
    if p99_ms is not None and p99_ms > cfg.random_read_p99_max_ms:
        return _r("storage.random-read", measured, expected, Q, "storage-randread-latency",
                  f"random-read p99 latency {p99_ms:.2f} ms over {cfg.random_read_p99_max_ms:g} ms")
    return _r("storage.random-read", measured, expected, P, None)


def _metadata(bundle: Bundle, cfg: AcceptanceConfig) -> CheckResult:
    expected = f">= {cfg.metadata_min_ops:g} ops/s each of create, stat, remove"
    rates: list[str] = []
    slow: list[str] = []
    for op, name in (("create", FIO_MD_CREATE), ("stat", FIO_MD_STAT), ("remove", FIO_MD_DELETE)):
        run = _fio(bundle, "storage.metadata", name, expected)
        if isinstance(run, CheckResult):
            return run
        ops = run.iops("read") + run.iops("write")  # the file engines count one I/O per file operation
        rates.append(f"{op} {ops:.0f}/s")
        if ops < cfg.metadata_min_ops:
            slow.append(f"{op} {ops:.0f}/s")
    return _r("storage.metadata", ", ".join(rates), expected, Q if slow else P, "storage-metadata-slow",
              f"metadata operations under {cfg.metadata_min_ops:g}/s: {', '.join(slow)}")


def _checkpoint(bundle: Bundle, storage: StorageConfig) -> CheckResult:
    size = storage.checkpoint_tib * TIB
    target = storage.target_checkpoint_write_seconds
    expected = f"{size / MB:.0f} MB written in <= {target:g} s"
    run = _fio(bundle, "storage.checkpoint", FIO_CHECKPOINT, expected)
    if isinstance(run, CheckResult):
        return run
    written, seconds = run.io_bytes("write"), run.runtime_s("write")
    measured = f"{written / MB:.0f} MB in {seconds:.1f} s over {len(run.jobs)} shards"
    if written < size * 0.99:
        return _r("storage.checkpoint", measured, expected, Q, "checkpoint-rehearsal-short",
                  f"the rehearsal wrote {written / MB:.0f} MB, not the plan's {size / MB:.0f} MB checkpoint")
    return _r("storage.checkpoint", measured, expected, P if seconds <= target else Q, "checkpoint-slow",
              f"a checkpoint took {seconds:.1f} s, over the {target:g} s target")


# --- network base check --------------------------------------------------------------------

def tcp_floor_gbps(instance: InstanceType, cfg: AcceptanceConfig) -> float:
    return instance.card_gbps * cfg.mgmt_tcp_min_share


def efa_floor_mbs(instance: InstanceType, cfg: AcceptanceConfig) -> float:
    return instance.card_gbps * 1000 / 8 * cfg.efa_bw_min_share


def network_checks(bundle: Bundle, pairs: Sequence[tuple[str, str]], instance: InstanceType,
                   cfg: AcceptanceConfig, efa: bool = True) -> list[CheckResult]:
    """Per sampled pair: TCP bandwidth and retransmits, RTT and loss, and (with EFA) the fabric."""
    out: list[CheckResult] = []
    for a, b in pairs:
        files = pair_files(a, b)
        out.append(_tcp(bundle, f"net.tcp[{a}--{b}]", files["iperf3"], instance, cfg))
        out.append(_ping(bundle, f"net.rtt[{a}--{b}]", files["ping"], cfg))
        if efa:
            out.append(_efa_latency(bundle, f"net.efa-latency[{a}--{b}]", files["pingpong"], cfg))
            out.append(_efa_bw(bundle, f"net.efa-bw[{a}--{b}]", files["rma_bw"], instance, cfg))
    return out


def _tcp(bundle: Bundle, check_id: str, name: str, instance: InstanceType, cfg: AcceptanceConfig) -> CheckResult:
    floor = tcp_floor_gbps(instance, cfg)
    expected = f">= {floor:g} Gbit/s, <= {cfg.mgmt_tcp_max_retransmits} retransmits"
    f = bundle.get(name)
    if not f.collected:
        return _missing(check_id, expected, name)
    if (absent := _absent(check_id, str(expected), f.text, f.exit_code, name)) is not None:
        return absent
    res = iperf3.parse_json(f.text)
    if res.unreadable:
        return _r(check_id, f"unreadable: {res.error}"[:300], expected, R, "iperf3-unreadable",
                  f"{name}: unreadable / tool failed: retest ({res.error})")
    if res.error or res.received_bps is None:
        return _r(check_id, f"iperf3 failed: {res.error}", expected, Q, "mgmt-link-down", f"{name}: {res.error}")
    gbps = res.received_bps / 1e9
    measured = f"{gbps:.2f} Gbit/s, {res.retransmits} retransmits"
    if gbps < floor:
        return _r(check_id, measured, expected, Q, "mgmt-tcp-slow", f"TCP {gbps:.2f} Gbit/s is under {floor:g}")
    if res.retransmits is not None and res.retransmits > cfg.mgmt_tcp_max_retransmits:
        return _r(check_id, measured, expected, W, "mgmt-tcp-retransmits",
                  f"{res.retransmits} TCP retransmits (a lossy link that still met the bandwidth floor)")
    return _r(check_id, measured, expected, P, None)


def _ping(bundle: Bundle, check_id: str, name: str, cfg: AcceptanceConfig) -> CheckResult:
    expected = f"avg rtt <= {cfg.mgmt_rtt_max_ms:g} ms, loss <= {cfg.mgmt_loss_max_percent:g}%"
    f = bundle.get(name)
    if not f.collected:
        return _missing(check_id, expected, name)
    if (absent := _absent(check_id, str(expected), f.text, f.exit_code, name)) is not None:
        return absent
    res = ping.parse_summary(f.text)
    if res.problems and not re.search(r"^ping: ", f.text, re.M):  # no statistics and no ping error line
        why = "; ".join(res.problems)
        return _r(check_id, f"unreadable: {why}"[:300], expected, R, "ping-unreadable",
                  f"{name}: unreadable / tool failed: retest ({why})")
    if res.problems or res.loss_percent is None:
        return _r(check_id, "; ".join(res.problems), expected, Q, "mgmt-link-down", f"{name}: no ping statistics")
    measured = (f"avg {res.rtt_avg_ms:g} ms, loss {res.loss_percent:g}%" if res.rtt_avg_ms is not None
                else f"no reply, loss {res.loss_percent:g}%")
    if res.loss_percent > cfg.mgmt_loss_max_percent:
        return _r(check_id, measured, expected, Q, "mgmt-packet-loss", f"{res.loss_percent:g}% packet loss")
    if res.rtt_avg_ms is not None and res.rtt_avg_ms > cfg.mgmt_rtt_max_ms:
        return _r(check_id, measured, expected, Q, "mgmt-latency-high",
                  f"average RTT {res.rtt_avg_ms:g} ms over {cfg.mgmt_rtt_max_ms:g} ms")
    return _r(check_id, measured, expected, P, None)


def _fab(bundle: Bundle, check_id: str, name: str, expected: str) -> fabtests.FabResult | CheckResult:
    f = bundle.get(name)
    if not f.collected:
        return _missing(check_id, expected, name)
    if (absent := _absent(check_id, expected, f.text, f.exit_code, name)) is not None:
        return absent
    res = fabtests.parse_table(f.text)
    if res.problems:  # a table we cannot read says nothing about the link: collect again
        why = "; ".join(res.problems)
        return _r(check_id, f"unreadable: {why}"[:300], expected, R, "efa-test-unreadable",
                  f"{name}: unreadable / tool failed: retest ({why})")
    if not res.rows:
        why = "; ".join(res.errors)
        return _r(check_id, f"no result: {why}", expected, Q, "efa-test-failed", f"{name}: {why}")
    return res


def _absent(check_id: str, expected: str, text: str, exit_code: int | None, name: str) -> CheckResult | None:
    """The file's tool is not installed (`fi_pingpong: command not found`): `tool-missing-<tool>`
    and a retest once it is installed, never a verdict on the link."""
    line = missing_tool(text, exit_code)
    if line is None:
        return None
    tool = re.sub(r"[^A-Za-z0-9._-]", "-", absent_command(line) or name.rsplit(".", 1)[0].split("-", 1)[0])
    return _r(check_id, f"tool missing: {line}", expected, R, f"tool-missing-{tool}",
              f"{tool} is not installed or not on PATH ({line}); install it and collect again")


# fi_pingpong sizes that measure latency rather than bandwidth, and how many iterations a row
# needs: fewer than EFA_MIN_ITERATIONS say nothing; the table's first row also carries the
# connection set-up (1-2 ms), which only EFA_SETUP_AMORTISED_ITERATIONS iterations dilute to
# a couple of microseconds (fabtests' own default is 10k iterations below 64 KiB: size_to_count).
EFA_LATENCY_MAX_BYTES = 4096
EFA_MIN_ITERATIONS = 10
EFA_SETUP_AMORTISED_ITERATIONS = 1000


def efa_latency_rows(res: fabtests.FabResult) -> list[fabtests.FabRow]:
    """The small-size rows that measure link latency: enough iterations, and not the first
    row's connection set-up unless enough iterations amortise it."""
    first = res.rows[0] if res.rows else None
    out = []
    for row in res.rows:
        if row.bytes > EFA_LATENCY_MAX_BYTES or row.iterations is None or row.iterations < EFA_MIN_ITERATIONS:
            continue
        if row is first and row.iterations < EFA_SETUP_AMORTISED_ITERATIONS:
            continue
        out.append(row)
    return out


def _efa_latency(bundle: Bundle, check_id: str, name: str, cfg: AcceptanceConfig) -> CheckResult:
    expected = (f"<= {cfg.efa_latency_max_us:g} usec/xfer, least over sizes <= {EFA_LATENCY_MAX_BYTES} B "
                f"(>= {EFA_MIN_ITERATIONS} iterations)")
    res = _fab(bundle, check_id, name, expected)
    if isinstance(res, CheckResult):
        return res
    rows = efa_latency_rows(res)
    if not rows:
        shown = ", ".join(f"{r.bytes} B x {r.iterations}" for r in res.rows if r.bytes <= EFA_LATENCY_MAX_BYTES)
        return _r(check_id, f"too few iterations to judge: {shown or 'no row <= 4096 B'}", expected, R,
                  "efa-latency-too-few-iterations",
                  f"{name}: no small-size row with enough iterations to separate link latency from connection "
                  f"set-up; rerun fi_pingpong with more iterations (retest)")
    best = min(rows, key=lambda r: r.usec_per_xfer)
    measured = f"{best.usec_per_xfer:g} usec/xfer at {best.bytes} B ({best.iterations} iterations)"
    return _r(check_id, measured, expected, P if best.usec_per_xfer <= cfg.efa_latency_max_us else Q,
              "efa-latency-high", f"EFA ping-pong {best.usec_per_xfer:g} us at {best.bytes} B, the least of "
              f"{len(rows)} small-size row(s)")


def _efa_bw(bundle: Bundle, check_id: str, name: str, instance: InstanceType, cfg: AcceptanceConfig) -> CheckResult:
    floor = efa_floor_mbs(instance, cfg)
    expected = f">= {floor:.0f} MB/s at the largest size"
    res = _fab(bundle, check_id, name, expected)
    if isinstance(res, CheckResult):
        return res
    row = res.largest
    assert row is not None
    measured = f"{row.mb_per_s:g} MB/s at {row.bytes} B"
    return _r(check_id, measured, expected, P if row.mb_per_s >= floor else Q, "efa-bw-low",
              f"EFA RMA bandwidth {row.mb_per_s:g} MB/s under {floor:.0f} MB/s")


# --- training smoke -------------------------------------------------------------------------

SMOKE_SCRIPT = "images/workloads/train_smoke.py"
# Where site.yml's role `workloads` installs images/workloads/ on every node (its workloads_dir)
WORKLOADS_DIR = "/opt/gpufleet/workloads"


class SmokeContainer(BaseModel):
    """The workload image the smoke job runs in, through pyxis (`srun --container-image`).

    Why: the job needs torch, which the node's own interpreter lacks; the stack's pinned
    workload image (`acceptance.workloadImage`) has it and is already on every node as the
    squashfs file role image_prepull wrote (`image` is that file, or any enroot URI). Each of
    `mounts` is a host folder bound read-write at the same path; `read_only` ones (the
    workloads folder) are bound `ro`. The home folder is not mounted (a job must not depend on
    it) and the image's entrypoint is not run (banners would interleave with the result line).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str
    mounts: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    python: str = "python"

    def srun_options(self) -> tuple[str, ...]:
        binds = [f"{d}:{d}:ro" for d in self.read_only] + [f"{d}:{d}" for d in self.mounts]
        return (f"--container-image={self.image}", *([f"--container-mounts={','.join(binds)}"] if binds else ()),
                "--no-container-mount-home", "--no-container-entrypoint")


def smoke_launch_spec(nodes: Sequence[str], ranks_per_node: int, python: str, script: str, data_dir: str,
                      steps: int, extra: Sequence[str] = (), name: str = "gpufleet-smoke",
                      env: Mapping[str, str] | None = None, container: SmokeContainer | None = None) -> LaunchSpec:
    """The smoke job as an srun launch spec, run by the pool's launcher like any gate job.

    One task per GPU (`ranks_per_node`); the script reads its rank from SLURM_PROCID and its
    rendezvous from the launch node's address; `-l` prefixes each line with its rank, which
    the parser strips. `env` (e.g. MASTER_PORT) is set in srun's environment, which
    `--export=ALL` hands to every task (inside a container too: pyxis keeps the task's
    environment). With a `container` the tasks run its python inside the workload image
    (pyxis), `python` (the host's interpreter) is not used.
    """
    nodes = tuple(nodes)
    env = dict(env or {})
    prefix = ("env", *(f"{k}={v}" for k, v in sorted(env.items()))) if env else ()
    runtime = (*container.srun_options(), container.python) if container is not None else (python,)
    argv = (*prefix, "srun", f"--job-name={name}", f"--nodelist={','.join(nodes)}", f"--nodes={len(nodes)}",
            f"--ntasks-per-node={ranks_per_node}", "--cpu-bind=none", "-l", "--export=ALL",
            *runtime, script, f"--data-dir={data_dir}", f"--steps={steps}", *extra)
    return LaunchSpec(kind="slurm", name=name, nodes=nodes, ranks=len(nodes) * ranks_per_node, env=env, argv=argv)


def smoke_floor(instance: InstanceType | None, world_size: int, cfg: AcceptanceConfig) -> float | None:
    if cfg.smoke_min_samples_per_second is not None:
        return cfg.smoke_min_samples_per_second
    if instance is None:
        return None
    per_gpu = SMOKE_SAMPLES_PER_SECOND_PER_GPU.get(instance.gpu_short)
    return per_gpu * world_size if per_gpu is not None else None


def smoke_checks(bundle: Bundle, instance: InstanceType | None, cfg: AcceptanceConfig) -> list[CheckResult]:
    f = bundle.get(TRAIN_SMOKE)
    if not f.collected:
        return [_missing("smoke.run", "one result line from rank 0", TRAIN_SMOKE)]
    parsed = train.parse_output(f.text)
    if parsed.result is None:
        why = "; ".join(parsed.problems)
        rc = f.exit_code
        return [_r("smoke.run", f"no result (exit {rc}): {why}", "one result line from rank 0", Q, "smoke-failed",
                   why)]
    res = parsed.result
    out = [_r("smoke.run", f"{res.world_size} ranks, {res.steps} steps, {res.backend}",
              "one result line from rank 0", P, None)]
    first, last = (res.loss[0], res.loss[-1]) if res.loss else (None, None)
    expected = f"last loss <= {cfg.smoke_loss_factor:g} x first"
    if first is None or last is None or not all(_finite(x) for x in res.loss):
        out.append(_r("smoke.loss", f"losses {list(res.loss)[:4]}", expected, Q, "smoke-loss-invalid",
                      "the loss is missing or not finite"))
    else:
        out.append(_r("smoke.loss", f"{first:.4g} -> {last:.4g}", expected,
                      P if last <= first * cfg.smoke_loss_factor else Q, "smoke-loss-flat",
                      f"the loss went from {first:.4g} to {last:.4g}, not below {cfg.smoke_loss_factor:g} x"))
    spread = (max(res.checksums) - min(res.checksums)) if res.checksums else None
    out.append(_r("smoke.ranks-agree", f"agree={res.ranks_agree}, checksum spread {spread}",
                  "every rank holds the same parameters", P if res.ranks_agree else Q, "smoke-ranks-diverged",
                  "ranks hold different parameters after the all-reduce: " + _diverged(res)))
    floor = smoke_floor(instance, res.world_size, cfg)
    if floor is None:
        out.append(_r("smoke.throughput", f"{res.samples_per_second:.0f} samples/s", "no floor for this type", W,
                      "smoke-no-floor", "no samples/s floor for this instance type: set smokeMinSamplesPerSecond"))
    else:
        out.append(_r("smoke.throughput", f"{res.samples_per_second:.0f} samples/s", f">= {floor:g} samples/s",
                      P if res.samples_per_second >= floor else Q, "smoke-throughput-low",
                      f"{res.samples_per_second:.0f} samples/s is under {floor:g}"))
    return out


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def _diverged(res: train.SmokeResult) -> str:
    if not res.checksums:
        return "no checksums reported"
    ref = max(set(res.checksums), key=res.checksums.count)
    odd = [str(rank) for rank, c in enumerate(res.checksums) if c != ref]
    hosts = [res.hosts[int(r)] for r in odd if int(r) < len(res.hosts)]
    return f"rank(s) {', '.join(odd)}" + (f" on {', '.join(hosts)}" if hosts else "")


def training_baseline(bundle: Bundle) -> dict | None:
    """What `state_dir/baselines/training.json` records for a passing smoke job."""
    parsed = train.parse_output(bundle.get(TRAIN_SMOKE).text)
    res = parsed.result
    if res is None:
        return None
    return {"world_size": res.world_size, "backend": res.backend, "steps": res.steps,
            "first_loss": res.loss[0] if res.loss else None, "last_loss": res.loss[-1] if res.loss else None,
            "samples_per_second": res.samples_per_second,
            "allreduce_ms_median": sorted(res.allreduce_ms)[len(res.allreduce_ms) // 2] if res.allreduce_ms else None,
            "data_loading_share": res.data_loading_share, "hosts": list(res.hosts)}


# --- a stage's outcome ----------------------------------------------------------------------

class StageOutcome(BaseModel):
    """One acceptance stage's decision: it passes unless a check blocks (REMEDIATE or worse)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str
    verdict: Verdict
    passed: bool
    reason_codes: tuple[str, ...]
    checks: tuple[CheckResult, ...]


def stage_outcome(stage: str, checks: Iterable[CheckResult]) -> StageOutcome:
    checks = tuple(checks)
    verdict = worst(c.verdict for c in checks)
    codes = tuple(dict.fromkeys(c.reason_code for c in checks if c.verdict.blocks_admission and c.reason_code))
    return StageOutcome(stage=stage, verdict=verdict, passed=not verdict.blocks_admission, reason_codes=codes,
                        checks=checks)
