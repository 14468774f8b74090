"""fio and iperf3 for real: their JSON through the real parsers and checks, and a throttled
device (a blkio/io.max limit on a loop device) and a throttled link (tc tbf on a veth between
two network namespaces) caught by the checks. Root only (loop devices, cgroups, namespaces)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.gates import acceptance as A
from gpufleet.gates.verdict import Verdict
from gpufleet.plan.storage import MB, TIB
from gpufleet.spec import AcceptanceConfig
from tests.acceptance.helpers import P5, bundle, storage

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-q"]
CHECKPOINT = 16 * 2**20


def ensure(tool: str, package: str) -> None:
    if shutil.which(tool):
        return
    if os.geteuid() != 0:
        pytest.skip(f"{tool} is missing and installing {package} needs root")
    if subprocess.run([*APT, "install", package], capture_output=True).returncode != 0:
        subprocess.run([*APT, "update"], capture_output=True)
        subprocess.run([*APT, "install", package], capture_output=True, check=True)


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout


@pytest.fixture
def loop_fs(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A 256 MiB ext4 file system on its own loop device: (mount point, MAJ:MIN)."""
    if os.geteuid() != 0:
        pytest.skip("loop devices and mounts need root")
    ensure("fio", "fio")
    image = tmp_path / "fs.img"
    with open(image, "wb") as f:
        f.truncate(256 * 2**20)
    dev = sh("losetup", "-f", "--show", str(image)).strip()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        sh("mkfs.ext4", "-q", dev)
        sh("mount", dev, str(mnt))
        try:
            yield mnt, sh("lsblk", "-dno", "MAJ:MIN", dev).strip()
        finally:
            subprocess.run(["umount", str(mnt)], check=False)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)


@contextmanager
def throttled(majmin: str, bytes_per_s: int) -> Iterator[Path]:
    """A cgroup whose reads and writes on the device are limited (cgroup v2 io.max, else v1 blkio)."""
    name = f"gpufleet-acc-{uuid.uuid4().hex[:8]}"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.is_file() and "io" in v2.read_text().split():
        group = Path("/sys/fs/cgroup") / name
        group.mkdir()
        (group / "io.max").write_text(f"{majmin} rbps={bytes_per_s} wbps={bytes_per_s}\n")
    elif Path("/sys/fs/cgroup/blkio").is_dir():
        group = Path("/sys/fs/cgroup/blkio") / name
        group.mkdir()
        (group / "blkio.throttle.read_bps_device").write_text(f"{majmin} {bytes_per_s}\n")
        (group / "blkio.throttle.write_bps_device").write_text(f"{majmin} {bytes_per_s}\n")
    else:
        pytest.skip("neither cgroup v2 io nor cgroup v1 blkio is available to throttle a device")
    try:
        yield group
    finally:
        group.rmdir()


def collect_storage(directory: Path, cgroup: Path | None = None) -> dict[str, str]:
    """Run every storage command as the collector does; in `cgroup` when given."""
    files = {}
    for name, argv in A.fio_commands(str(directory), jobs=2, checkpoint_bytes=CHECKPOINT, shards=4, size="16M",
                                     runtime_s=3, metadata_files=100).items():
        if cgroup is not None:  # the shell joins the cgroup, then becomes fio
            argv = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "fio-in-cgroup", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-500:]}"
        files[name] = proc.stdout
    return files


def _storage_verdicts(files: dict[str, str]) -> dict[str, object]:
    cfg, plan = storage(checkpoint_tib=CHECKPOINT / TIB, target_checkpoint_write_seconds=4)
    # the model of a small file system: 20 MB/s (a loop device does hundreds; the throttle 2)
    plan = plan.model_copy(update={"aggregate_throughput_mbs": 20})
    acc = AcceptanceConfig(storage_clients=2, metadata_min_ops=20, random_read_min_iops=50,
                           random_read_p99_max_ms=1000)
    return {c.check_id: c for c in A.storage_checks(bundle(files), cfg, plan, P5, acc)}


def test_fio_on_a_local_file_system_passes_the_checks(loop_fs):
    mnt, _ = loop_fs
    checks = _storage_verdicts(collect_storage(mnt))
    assert all(c.verdict is Verdict.PASS for c in checks.values()), [c for c in checks.values() if c.verdict is not Verdict.PASS]
    assert f"{CHECKPOINT / MB:.0f} MB in" in checks["storage.checkpoint"].measured


def test_a_throttled_device_is_caught(loop_fs):
    mnt, majmin = loop_fs
    with throttled(majmin, 2 * 2**20) as group:
        checks = _storage_verdicts(collect_storage(mnt, group))
    codes = {c.reason_code for c in checks.values() if c.verdict is Verdict.QUARANTINE}
    assert {"storage-write-slow", "storage-read-slow", "checkpoint-slow"} <= codes


@contextmanager
def namespace_pair(rate: str | None, queue_bytes: int | None = None) -> Iterator[tuple[str, str, str]]:
    """Two network namespaces joined by a veth pair, both ends up (carrier on) before it yields;
    `rate` limits the client side with tc tbf, `queue_bytes` gives that tbf a queue so short it drops."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    ensure("iperf3", "iperf3")
    ensure("ping", "iputils-ping")  # not in a bare image: without it the ping file is empty ("no ping statistics")
    tag = uuid.uuid4().hex[:6]
    a, b, va, vb = f"gfa-{tag}", f"gfb-{tag}", f"gfa{tag}", f"gfb{tag}"
    sh("ip", "netns", "add", a)
    try:
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        sh("ip", "link", "set", va, "netns", a)
        sh("ip", "link", "set", vb, "netns", b)
        sh("ip", "-n", a, "addr", "add", "10.213.7.1/24", "dev", va)
        sh("ip", "-n", b, "addr", "add", "10.213.7.2/24", "dev", vb)
        for ns, dev in ((a, va), (b, vb)):
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        wait_until_up((a, va), (b, vb))
        if rate:
            shape = ["limit", str(queue_bytes)] if queue_bytes else ["latency", "50ms"]
            sh("ip", "netns", "exec", a, "tc", "qdisc", "add", "dev", va, "root", "tbf", "rate", rate, "burst",
               "32kbit", *shape)
        yield a, b, "10.213.7.2"
    finally:
        for ns in (a, b):
            # only what this test started runs in its own fresh namespaces
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                subprocess.run(["kill", pid], check=False)
            subprocess.run(["ip", "netns", "del", ns], check=False)


def wait_until_up(*ends: tuple[str, str], timeout_s: float = 10.0) -> None:
    """Each veth end's operstate UP and its connected route present: a ping or connect sent before
    that fails with 'Network is unreachable' and prints no statistics."""
    deadline = time.monotonic() + timeout_s
    for ns, dev in ends:
        while True:
            state = subprocess.run(["ip", "-n", ns, "-o", "link", "show", dev], capture_output=True, text=True).stdout
            route = subprocess.run(["ip", "-n", ns, "route", "show", "dev", dev], capture_output=True, text=True).stdout
            if "state UP" in state and "10.213.7.0/24" in route:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{ns}/{dev} not up after {timeout_s:g} s: {state.strip()} / {route.strip()!r}")
            time.sleep(0.05)


PACE = "250M"
"""iperf3's rate per stream (4 streams: 1 Gbit/s), far above NET's floor. Why paced: unpaced, the
client pushes 3-8 Gbit/s through a veth on 2 busy cores and counts 2-1,000+ retransmits per run
with no packet lost anywhere (no drop in softnet_stat, none at the receiver; nstat: fast
retransmits after SACK reordering and tail-loss probes): segments of one flow are handed to the
backlog of whichever CPU the sender runs on and are processed out of order, and ACKs wait for a
CPU. Paced at 1 Gbit/s the same veth shows 0-10; a drop on the link still shows hundreds."""


def collect_pair(a: str, b: str, address: str) -> dict[str, str]:
    files = A.pair_files("n0", "n1")
    server = subprocess.Popen(["ip", "netns", "exec", b, "iperf3", "-s", "-1", "-p", "5201"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # wait for the server's socket
            if subprocess.run(["ip", "netns", "exec", b, "ss", "-ltn", "sport = :5201"], capture_output=True,
                              text=True).stdout.count("LISTEN"):
                break
            subprocess.run(["sleep", "0.1"])
        iperf = subprocess.run(["ip", "netns", "exec", a, "iperf3", "-c", address, "-p", "5201", "-t", "2", "-P", "4",
                                "-b", PACE, "-J"], capture_output=True, text=True, timeout=60)
    finally:
        server.wait(timeout=30)
    ping = subprocess.run(["ip", "netns", "exec", a, "ping", "-n", "-c", "10", "-i", "0.2", "-w", "20", address],
                          capture_output=True, text=True, timeout=60)
    assert "packets transmitted" in ping.stdout, f"ping printed no statistics (rc {ping.returncode}): {ping.stderr}"
    return {files["iperf3"]: iperf.stdout, files["ping"]: ping.stdout}


NET = AcceptanceConfig(mgmt_tcp_min_share=0.002, mgmt_rtt_max_ms=5,  # 0.2 Gbit/s on a p5 card: a veth here
                       mgmt_tcp_max_retransmits=100)  # a paced veth: 0-10 measured under load (PACE); a lossy one: 100s


def test_iperf3_and_ping_between_namespaces_pass():
    with namespace_pair(None) as (a, b, address):
        files = collect_pair(a, b, address)
    checks = A.network_checks(bundle(files), [("n0", "n1")], P5, NET, efa=False)
    assert [c.verdict for c in checks] == [Verdict.PASS, Verdict.PASS], checks


def test_a_link_that_drops_but_meets_the_floor_warns_of_retransmits():
    """A tbf at 400 Mbit/s with a 100 kB queue: 1 Gbit/s offered, the excess dropped (measured: 0.25
    Gbit/s through, 9,000-16,000 retransmits). The floor here is 0.05 Gbit/s, so the retransmits decide."""
    with namespace_pair("400mbit", queue_bytes=100_000) as (a, b, address):
        files = collect_pair(a, b, address)
    lossy = NET.model_copy(update={"mgmt_tcp_min_share": 0.0005})
    tcp, rtt = A.network_checks(bundle(files), [("n0", "n1")], P5, lossy, efa=False)
    assert tcp.reason_code == "mgmt-tcp-retransmits" and tcp.verdict is Verdict.WARN, tcp
    assert rtt.verdict is Verdict.PASS, rtt


def test_a_throttled_link_is_caught():
    with namespace_pair("50mbit") as (a, b, address):
        files = collect_pair(a, b, address)
    tcp, rtt = A.network_checks(bundle(files), [("n0", "n1")], P5, NET, efa=False)
    assert tcp.reason_code == "mgmt-tcp-slow" and tcp.verdict is Verdict.QUARANTINE
    assert float(tcp.measured.split()[0]) < 0.06
