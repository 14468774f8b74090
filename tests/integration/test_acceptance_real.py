"""The storage and network base checks of a real stack, for real: `playbooks/acceptance.yml`
through `AnsibleExecutor` over SSH to four network-namespace hosts (netns_lab.py), collected by
`PlaybookAcceptanceCollector` into the stage bundles, then the real parsers and checks.

- storage: fio from two clients at once against a shared local folder standing in for the FSx
  mount (sequential write/read, random read, create/stat/remove, the checkpoint rehearsal in
  shards); every check passes against a small modelled file system;
- network: two disjoint pairs, iperf3 `-J`, ping and `fi_pingpong` with libfabric's tcp provider
  (from Debian's libfabric-bin, unpacked into the test's folder and put on the play's PATH; it
  ships no `fi_rma_bw`, so that file is "not collected"); then one pair's link is limited with
  tc tbf and exactly that pair's TCP check fails;
- `--check` runs the storage play and makes or writes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from configure_host import PROJECT_ROOT, ensure_system_packages, require_root
from netns_lab import NetnsLab
from gpufleet.configure.executor import AnsibleExecutor
from gpufleet.configure.inventory import SshConnection
from gpufleet.configure.runner import AnsibleConfigurator
from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import read_bundle
from gpufleet.gates.verdict import Verdict
from gpufleet.plan.storage import MB, TIB
from gpufleet.rollout.acceptance_collect import NetworkTools, PlaybookAcceptanceCollector
from gpufleet.ports import Instance
from gpufleet.spec import AcceptanceConfig
from tests.acceptance.helpers import P5, storage

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

HOSTS = ("n0", "n1", "n2", "n3")
PAIRS = [("n0", "n1"), ("n2", "n3")]
CHECKPOINT = 16 * 2**20
# a small file system's model (20 MB/s: the local disk does hundreds) and a veth's bars: 0.2 Gbit/s
# on a p5 card, fi_pingpong over the tcp provider on a loaded 2-core machine (milliseconds), and
# 100 retransmits: iperf3 paced at 4 x 250 Mbit/s, as in tests/acceptance/test_real_tools.py (unpaced,
# a veth on 2 busy cores reorders the flow across CPUs and counted 1,096 and 3,173 spurious
# retransmits in two suite runs, with nothing dropped; paced, 0-18)
CFG = AcceptanceConfig(storage_clients=2, checkpoint_shards=4, metadata_min_ops=20, random_read_min_iops=50,
                       random_read_p99_max_ms=1000, mgmt_tcp_min_share=0.002, mgmt_rtt_max_ms=5,
                       efa_latency_max_us=200_000, mgmt_tcp_max_retransmits=100)
TOOLS = NetworkTools(provider="tcp", iperf3_seconds=2, iperf3_streams=4, iperf3_stream_rate="250M", ping_count=5,
                     fabric_iterations=1000, fabric_sizes="64", rma_bw=False)  # one row: the gate reads a first
# row only when its iterations amortise the connection set-up (gates.acceptance.EFA_SETUP_AMORTISED_ITERATIONS)


def unpacked_fabtests(dest: Path) -> Path:
    """fi_pingpong from Debian's libfabric-bin, unpacked into `dest` rather than installed: the
    package would put fi_info on this machine's PATH, which tells other tests (tests/gates) that
    this host has EFA tools. Its library, libfabric1, is installed."""
    dest.mkdir(parents=True, exist_ok=True)
    download = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "download", "libfabric-bin"]
    if subprocess.run(download, cwd=dest, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "update", "-q"], capture_output=True)
        proc = subprocess.run(download, cwd=dest, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
    deb = next(dest.glob("libfabric-bin_*.deb"))
    subprocess.run(["dpkg", "-x", str(deb), str(dest / "root")], check=True)
    return dest / "root" / "usr" / "bin"


@pytest.fixture(scope="module")
def lab_hosts(collections_dir, tmp_path_factory):
    require_root("network namespaces with sshd")
    ensure_system_packages("openssh-server", "openssh-client", "iproute2", "fio", "iperf3", "libfabric1",
                           "iputils-ping")
    tmp = tmp_path_factory.mktemp("acceptance-real")
    fabtests = unpacked_fabtests(tmp / "fabtests")
    with NetnsLab(tmp / "lab") as lab:
        for name in HOSTS:
            lab.add_host(name)  # no chroot: the hosts share this machine's tools and folders
        runner = AnsibleConfigurator(tmp / "runner", playbook_dir=PROJECT_ROOT / "playbooks",
                                     collections=collections_dir, forks=len(HOSTS))
        executor = AnsibleExecutor(runner, SshConnection(user="root", private_key_file=lab.key, connect_timeout_s=5),
                                   {}, context={"ansible_python_interpreter": "/usr/bin/python3",
                                                "gpufleet_path": f"{fabtests}:/usr/sbin:/usr/bin:/sbin:/bin"})
        inventory = {n: Instance(n, f"i-{i:017x}", 1, i // 2, lab.hosts[n].address) for i, n in enumerate(HOSTS)}
        mount = tmp / "fsx"
        mount.mkdir()
        collector = PlaybookAcceptanceCollector(executor, lambda: inventory, str(mount), CFG, CHECKPOINT, TOOLS,
                                                fio_size="16M", fio_runtime_s=3, metadata_files=100)
        yield lab, collector, tmp, mount


def test_fio_from_two_clients_passes_the_storage_checks(lab_hosts):
    lab, collector, tmp, mount = lab_hosts
    folder = collector.collect("storage", ["n0", "n1"], [], tmp / "bundles" / "storage")
    bundle = read_bundle(folder)
    assert set(bundle.files) == set(A.STORAGE_FILES)
    cfg, plan = storage(checkpoint_tib=CHECKPOINT / TIB, target_checkpoint_write_seconds=30)
    plan = plan.model_copy(update={"aggregate_throughput_mbs": 20})
    checks = {c.check_id: c for c in A.storage_checks(bundle, cfg, plan, P5, CFG)}
    assert all(c.verdict is Verdict.PASS for c in checks.values()), [c for c in checks.values()
                                                                     if c.verdict is not Verdict.PASS]
    write = json.loads(bundle.files[A.FIO_SEQ_WRITE])
    assert len(write["jobs"]) == 2  # one job per client, merged into one document
    # the plan's whole checkpoint, in shards over both clients
    assert checks["storage.checkpoint"].measured.startswith(f"{CHECKPOINT / MB:.0f} MB in")
    assert bundle.manifest.files[A.FIO_SEQ_WRITE].command.startswith("on 2 clients at once: fio ")
    assert list((mount / "gpufleet-acceptance").iterdir()) == []  # each client removed its own folder


def _network(collector, tmp: Path, name: str):
    bundle = read_bundle(collector.collect("network", list(HOSTS), PAIRS, tmp / "bundles" / name))
    return bundle, {c.check_id: c for c in A.network_checks(bundle, PAIRS, P5, CFG, efa=True)}


def test_iperf3_ping_and_fi_pingpong_between_pairs_pass(lab_hosts):
    lab, collector, tmp, _ = lab_hosts
    bundle, checks = _network(collector, tmp, "network")
    for a, b in PAIRS:
        for check in ("tcp", "rtt", "efa-latency"):
            c = checks[f"net.{check}[{a}--{b}]"]
            assert c.verdict is Verdict.PASS, c
        # Debian's libfabric-bin has no fi_rma_bw: its file is not collected, and says so
        assert checks[f"net.efa-bw[{a}--{b}]"].reason_code.startswith("missing-fi_rma_bw")
    assert json.loads(bundle.files["iperf3-n0--n1.json"])["start"]["connecting_to"]["host"] == lab.hosts["n1"].address
    assert "-p tcp" in bundle.manifest.files["fi_pingpong-n2--n3.txt"].command


def test_a_tc_limited_link_is_caught_on_its_pair_only(lab_hosts):
    lab, collector, tmp, _ = lab_hosts
    veth = lab.hosts["n3"].veth  # the bridge side: what the bridge sends to n3 (the iperf3 data) is limited
    subprocess.run(["tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "50mbit", "burst", "32kbit", "latency",
                    "50ms"], check=True)
    try:
        _, checks = _network(collector, tmp, "network-limited")
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], check=False)
    slow = checks["net.tcp[n2--n3]"]
    assert slow.verdict is Verdict.QUARANTINE and slow.reason_code == "mgmt-tcp-slow"
    assert float(slow.measured.split()[0]) < 0.06
    assert checks["net.tcp[n0--n1]"].verdict is Verdict.PASS


def test_check_mode_runs_and_writes_nothing(lab_hosts):
    """`--check` over the same hosts: every command is skipped, no file is made or written."""
    lab, collector, tmp, mount = lab_hosts
    out = tmp / "check-mode"
    out.mkdir()
    plan = collector._storage_plan({n: Instance(n, "i-0", 1, 0, lab.hosts[n].address) for n in ("n0", "n1")})
    inventory = tmp / "check-hosts.ini"
    inventory.write_text("".join(f"{n} ansible_host={lab.hosts[n].address}\n" for n in ("n0", "n1")))
    ansible = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
    proc = subprocess.run(
        [ansible, "--check", "-i", str(inventory), str(PROJECT_ROOT / "playbooks" / "acceptance.yml"), "-u", "root",
         "--private-key", str(lab.key), "-e", json.dumps({
             "gpufleet_acceptance_stage": "storage", "gpufleet_acceptance_plan": plan, "gpufleet_acceptance_out": str(out),
             "ansible_python_interpreter": "/usr/bin/python3", "gpufleet_become": False})],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_NOCOLOR": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert list(out.iterdir()) == [] and list((mount / "gpufleet-acceptance").iterdir()) == []
