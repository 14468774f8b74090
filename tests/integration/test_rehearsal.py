"""A rollout rehearsed over real transport: the orchestrator over 8 hosts, real SSH, the real
playbooks, the real gates and a real Slurm whose slurmd run on those hosts.

Each host is a network namespace on a private bridge running its own sshd, which chroots every
session into the host's overlay of the Debian base (netns_lab.py). The stack
(Pulumi.rehearsal.yaml) plans 8 slots in two batches, canary first, with no spares. The rollout
is `gpufleet.rollout.orchestrator.Orchestrator` with the adapters a bare-metal stack would get:

- Provisioner: `gpufleet.rollout.static_hosts` over an inventory file naming the 8 hosts;
- Executor: `gpufleet.configure.executor.AnsibleExecutor` over SSH: the real `site.yml` converges
  every host from the local apt repository of dummy packages pinned to images/bom.yaml, then the
  hosts get their "hardware" (stub GPU tools printing what `gpufleet.gates.synth` renders for the
  node in the real tools' formats), and the real `preflight.yml` collects the bundles;
- Pool: the real local Slurm (`gpufleet.pool.slurm.local`), slurmctld on this machine and one slurmd
  INSIDE each host's namespace (NodeAddr = the host's address), driven by the Slurm adapter:
  registration drains, admission RESUMEs, quarantine DRAINs with the reason code, and the
  multi-node baselines are `srun` steps (with the stack's `srunMpi: none`: Debian's Slurm has no
  PMIx) that land on the hosts, whose nccl-tests stub prints the simulator's fabric output
  (nccl_stub.py);
- the real gates decide, and the report is built from the journal as `gpufleet rollout` does.

One host of the second batch loses its link while its DCGM diagnostic runs: it ends unreachable,
quarantined, drained in Slurm with that reason, and the rollout one slot short (exit 3 in the
CLI: no spares on static hosts); the other seven are admitted and idle in their partition.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import pytest
import yaml

from apt_fixture_repo import build_repo, install_into, local_site_vars
from configure_host import PROJECT_ROOT, chroot, ensure_system_packages, require_root
from netns_lab import NetnsLab
from node_stubs import dispatch, install_outputs, install_tool
from gpufleet.bom import load_bom
from gpufleet.configure.executor import AnsibleExecutor
from gpufleet.configure.inventory import SshConnection
from gpufleet.configure.runner import AnsibleConfigurator
from gpufleet.gates import bundle as B
from gpufleet.gates import synth
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.verdict import Action
from gpufleet.plan import plan_stack
from gpufleet.pool.protocol import NodeState as PoolNodeState
from gpufleet.pool.slurm.adapter import SlurmPool
from gpufleet.pool.slurm.local import LocalSlurm, NodeHost, slurm_version
from gpufleet.project import Project
from gpufleet.reports import rollout as report
from gpufleet.rollout.backends import LocalJournalStore
from gpufleet.rollout.journal import Journal
from gpufleet.rollout.batch_stages import STAGE_CODE
from gpufleet.rollout.orchestrator import Orchestrator
from gpufleet.ports import HostOutcome, HostStatus, Instance, RemediateAction, StageResult, WallClock
from gpufleet.rollout.run_config import Adapters
from gpufleet.rollout.state import NodeStage
from gpufleet.rollout.static_hosts import StaticHostsProvisioner
from gpufleet.rollout.wiring import gate_settings, options
from gpufleet.sim.fabric import healthy_multi_busbw
from gpufleet.spec import load_stack_path

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
STACK = "rehearsal"
STACK_FILE = HERE / "Pulumi.rehearsal.yaml"
NCCL_STUB = HERE / "nccl_stub.py"
OS = "ubuntu-22.04"
POOL = "slurm"
INSTANCE_TYPE = "p5.48xlarge"
CUT = "rehearsal-b0005-n00005"  # batch 2; goes dark during its DCGM diagnostic
CANARY = "gpufleet-rehearsal-munge-key"
PARTITION = "train"


def node_spec(host: Instance, bom) -> synth.NodeSpec:
    return synth.NodeSpec(slot=host.slot, instance_type=INSTANCE_TYPE, instance_id=host.instance_id,
                          versions=synth.bom_versions(bom, OS), batch=host.batch, stack=STACK, os=OS)


def remapped_rows_csv(query_csv: str) -> str:
    """`nvidia-smi --query-remapped-rows=...` for healthy GPUs, in the captured format."""
    col = _columns(query_csv)
    lines = ["gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
             "remapped_rows.failure"]
    return "\n".join(lines + [f"{bus}, 0, 0, No, No" for bus in col["pci.bus_id"]]) + "\n"


def inventory_csv(query_csv: str) -> str:
    """`nvidia-smi --query-gpu=driver_version,name,serial,pci.bus_id --format=csv,noheader` (node_facts)."""
    col = _columns(query_csv)
    return "".join(f"{d}, {name}, 16549220012{i:02d}, {bus}\n"
                   for i, (d, name, bus) in enumerate(zip(col["driver_version"], col["name"], col["pci.bus_id"])))


def _columns(query_csv: str) -> dict[str, list[str]]:
    header, *rows = query_csv.strip().splitlines()
    names = [h.split(" [")[0] for h in header.split(", ")]
    return {name: [r.split(", ")[i] for r in rows] for i, name in enumerate(names)}


def install_hardware(root: Path, n: synth.NodeSpec, cut: bool, fabric_json: Path) -> None:
    """The node's GPU tools and version sources, printing what synth renders for `n`; the `cut`
    host's DCGM diagnostic runs long enough to lose its link during it."""
    files = synth.node_files(n)
    version = {key: synth.version_output(key, v)[0] for key, v in n.versions.items() if key in synth.VERSION_OUTPUTS}
    outputs = {**files, B.REMAPPED_ROWS: remapped_rows_csv(files[B.QUERY_GPU]), "inventory.csv": inventory_csv(files[B.QUERY_GPU]),
               **{f"version-{k}": text for k, text in version.items()}}
    install_outputs(root, outputs)
    bin_ = "/usr/local/bin"
    install_tool(root, f"{bin_}/nvidia-smi", dispatch({
        '"--query-gpu=driver_version,name,serial,pci.bus_id --format=csv,noheader"': "inventory.csv",
        "--query-gpu=*": B.QUERY_GPU, "--query-remapped-rows=*": B.REMAPPED_ROWS, "-q": B.SMI_Q,
        '"nvlink -s"': B.NVLINK_S, '"topo -m"': B.TOPO_M}))
    install_tool(root, f"{bin_}/journalctl", dispatch({"-k*": B.KERNEL_LOG}))
    install_tool(root, f"{bin_}/lspci", dispatch({'"-d 1d0f:"': B.LSPCI_EFA}))
    install_tool(root, f"{bin_}/systemctl", dispatch({'"is-active nvidia-fabricmanager"': B.FABRICMANAGER}))
    mount_line = next(line for line in files[B.LUSTRE].splitlines() if line.startswith("mount: "))
    install_tool(root, f"{bin_}/findmnt", f"echo {mount_line.removeprefix('mount: ')!r}")
    # the preflight's container check: containerd's ctr with the NVIDIA runtime (a pull, then the run)
    install_tool(root, f"{bin_}/ctr", dispatch({
        '"-n k8s.io images pull "*': "!true",
        '"-n k8s.io run --rm --runc-binary=/usr/bin/nvidia-container-runtime --env NVIDIA_VISIBLE_DEVICES=all "*'
        '" nvidia-smi -L"': B.CONTAINER_GPUS}))
    diag = f"!sleep {30 if cut else 1}; cat /srv/gpufleet-stubs/{B.DCGM_DIAG}"
    install_tool(root, f"{bin_}/dcgmi", dispatch({'"diag -r "*" -j"': diag, "--version": "version-dcgm"}))
    # one binary for both: the preflight's single-node runs (over SSH, chrooted into the host's
    # root) and the baselines' multi-node runs (srun steps of the host's slurmd, which sees the
    # root's /opt only): every node's first task renders the fabric model's output
    install_tool(root, "/opt/nccl-tests/build/all_reduce_perf",
                 'if [ "${SLURM_STEP_NUM_NODES:-1}" -gt 1 ]; then\n'
                 '  [ "$SLURM_LOCALID" = 0 ] || exit 0\n'
                 f'  exec {sys.executable} {NCCL_STUB} {fabric_json} "$@"\n'
                 "fi\n"
                 # the loopback file less its first line, which the preflight prints itself (lsmod's modules)
                 f'[ "$NCCL_P2P_DISABLE" = 1 ] && exec tail -n +2 /srv/gpufleet-stubs/{B.NCCL_EFA_LOOPBACK}\n'
                 f"cat /srv/gpufleet-stubs/{B.NCCL_INTRA}")
    # fi_info: the EFA installer (site.yml) put its own under /opt/amazon/efa/bin, first on the PATH
    install_tool(root, "/opt/amazon/efa/bin/fi_info", dispatch({'"-p efa"*': B.FI_INFO, "--version": "version-libfabric"}))
    for tool, key in (("nv-fabricmanager", "fabric_manager"), ("nvcc", "cuda"), ("containerd", "containerd"),
                      ("nvidia-ctk", "nvidia_container_toolkit"), ("lfs", "lustre_client"), ("slurmd", "slurm")):
        install_tool(root, f"{bin_}/{tool}", f"cat /srv/gpufleet-stubs/version-{key}")
    install_tool(root, f"{bin_}/modinfo", dispatch({'"-F version gdrdrv"': "!" + f"echo {n.versions['gdrcopy']}"}))
    install_tool(root, f"{bin_}/uname", dispatch({"-r": "version-kernel", "*": '!exec /bin/uname "$@"'}))
    # the peer-memory module GPUDirect RDMA over EFA needs (the preflight's loopback lists lsmod's)
    install_tool(root, f"{bin_}/lsmod", "printf 'Module                  Size  Used by\\nefa_nv_peermem         24576  0\\n'")
    install_tool(root, f"{bin_}/strings", 'tr -c "[:print:]" "\\n" < "$1" | grep -E ".{4,}"')
    lib = root / "usr/lib/x86_64-linux-gnu" / f"libnccl.so.{n.versions['nccl']}"
    lib.write_bytes(b"\x7fELF")
    ofi = root / "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    ofi.parent.mkdir(parents=True, exist_ok=True)
    ofi.write_bytes(b"\x7fELF\x00\x01" + version["aws_ofi_nccl"].encode() + b"\x00")
    (root / "etc/os-release").unlink(missing_ok=True)
    (root / "etc/os-release").write_text(synth.OS_RELEASE[OS])


class HostsWithGpus:
    """The Executor port over the AnsibleExecutor; a host gets its stub GPU tools once its site.yml
    has converged (the EFA installer lays down its own fi_info, which the stub replaces, as a real
    host's would answer from its devices). Every other call goes straight through."""

    def __init__(self, inner: AnsibleExecutor, install: Callable[[str], None]) -> None:
        self.inner, self.install = inner, install

    def configure(self, instances: Sequence[Instance]) -> StageResult:
        result = self.inner.configure(instances)
        for slot in result.ok():
            self.install(slot)
        return result

    def preflight(self, instances: Sequence[Instance], dest: Path) -> StageResult:
        return self.inner.preflight(instances, dest)

    def remediate(self, instance: Instance, action: RemediateAction) -> HostOutcome:
        return self.inner.remediate(instance, action)


def _cut_during_diag(lab: NetnsLab, executor: AnsibleExecutor) -> list[threading.Timer]:
    """Take CUT's link away a few seconds into its gate commands (its DCGM diagnostic runs 30 s)."""
    timers: list[threading.Timer] = []
    run = executor.runner.run

    def watching(*args, **kwargs):
        progress = kwargs["on_progress"]

        def on_progress(p):
            progress(p)
            if p.host == CUT and p.task.startswith("Read the instance id") and not timers:
                timers.append(threading.Timer(3.0, lab.cut, (CUT,)))
                timers[0].start()
        return run(*args, **{**kwargs, "on_progress": on_progress})

    executor.runner.run = watching
    return timers


def slurmd_inside(lab: NetnsLab, slot: str) -> NodeHost:
    """The slot's slurmd in its host's network namespace, named after the slot, seeing the host's
    /opt (its nccl-tests) in a mount namespace of its own; nsenter, not `ip netns exec`, which
    would remount /sys without the cgroup hierarchy slurmd needs."""
    host = lab.hosts[slot]
    setup = f'hostname {slot} && mount --bind {host.root}/opt /opt && exec "$@"'
    return NodeHost(address=host.address, enter=("nsenter", f"--net=/run/netns/{host.netns}", "unshare", "--mount",
                                                 "--uts", "sh", "-c", setup, "sh"))


def sh(*argv: str, env: dict[str, str]) -> str:
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def rollout(base_rootfs, collections_dir, tmp_path_factory):
    require_root("network namespaces with sshd and slurmd")
    ensure_system_packages("openssh-server", "openssh-client", "iproute2", "util-linux", "slurm-wlm")
    tmp = tmp_path_factory.mktemp("rehearsal")
    spec = load_stack_path(STACK_FILE)
    plan = plan_stack(spec)
    slots = [n.name for n in plan.nodes]
    assert CUT in slots and len(plan.batches) == 2 and plan.topology.spare_nodes == 0
    bom = load_bom()
    repo = build_repo(bom, OS, tmp / "repo", tmp)
    slurm = LocalSlurm(tmp / "slurm")
    with NetnsLab(tmp / "lab") as lab:
        try:
            yield from _rehearse(spec, plan, slots, bom, repo, lab, slurm, tmp, base_rootfs, collections_dir)
        finally:
            slurm.down()  # before the lab removes the namespaces and unmounts the roots


def _rehearse(spec, plan, slots, bom, repo, lab, slurm, tmp, base_rootfs, collections_dir):
    for slot in slots:
        root = lab.overlay_root(slot, [base_rootfs])
        install_into(root, bom, OS, tmp, prebuilt=repo)
        (root / "srv/canary-secret.b64").write_text(base64.b64encode(CANARY.encode()).decode() + "\n")
        # /proc/driver/nvidia/version: bound before sshd starts (its mount namespace sees only the
        # mounts made before it)
        driver = lab.roots_dir / f"{slot}-proc-driver"
        (driver / "nvidia").mkdir(parents=True)
        driver_version = synth.bom_versions(bom, OS)["nvidia_driver"]
        (driver / "nvidia/version").write_text(synth.version_output("nvidia_driver", driver_version)[0])
        lab.mount("--bind", str(driver), str(root / "proc/driver"))
        lab.add_host(slot, root=root)
    # the inventory a bare-metal operator would write
    inventory = tmp / "hosts.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": [
        {"slot": s, "address": lab.hosts[s].address, "instanceId": f"i-0{i:016x}"} for i, s in enumerate(slots)]}))
    provisioner = StaticHostsProvisioner.from_file(inventory, plan)
    hosts = provisioner.inventory()
    fabric_json = tmp / "fabric.json"  # what nccl_stub.py renders from
    fabric_json.write_text(json.dumps({
        "stack": STACK, "instance_type": INSTANCE_TYPE, "versions": synth.bom_versions(bom, OS),
        "nodes": {s: {"slot": s, "instance_id": h.instance_id, "private_ip": h.private_ip, "batch": h.batch,
                      "block": h.block} for s, h in hosts.items()}}))

    slurm.up(spec, plan, hosts={s: slurmd_inside(lab, s) for s in slots}, controller_address=str(lab.net[1]))
    pool = SlurmPool(slurm.cli(timeout_s=60), version=slurm_version(),
                     failures_before_blacklist=spec.rollout.failures_before_blacklist)

    runner = AnsibleConfigurator(tmp / "state" / "runner", playbook_dir=PROJECT_ROOT / "playbooks",
                                 collections=collections_dir, forks=len(slots))
    ansible = AnsibleExecutor(runner, SshConnection(user="root", private_key_file=lab.key, connect_timeout_s=3),
                              local_site_vars(bom, OS, INSTANCE_TYPE), groups=(POOL,),
                              context={"gpufleet_stack": STACK, "gpufleet_instance_type": INSTANCE_TYPE,
                                       "ansible_python_interpreter": "/usr/bin/python3"})
    executor = HostsWithGpus(ansible, lambda slot: install_hardware(
        lab.hosts[slot].root, node_spec(hosts[slot], bom), cut=slot == CUT, fabric_json=fabric_json))
    cut = _cut_during_diag(lab, ansible)

    project = Project(root=PROJECT_ROOT, name="gpufleet", stacks_dir=HERE)
    settings = gate_settings(spec, project)
    opts = replace(options(spec, None, threaded=False), launch_timeout_s=180)
    state_dir = tmp / "state"
    journal = Journal(LocalJournalStore(state_dir / "journal.jsonl"), STACK)
    journal.load()
    orch = Orchestrator(plan, STACK, Adapters(provisioner, executor, pool, WallClock()), journal, settings,
                        state_dir, opts)
    started = time.monotonic()
    outcome = orch.run()
    wall = time.monotonic() - started
    journal.close()
    state = outcome.state
    records = [AdmissionRecord.model_validate(n.record) for _, n in sorted(state.nodes.items()) if n.record]
    rep = report.build(plan, state, STACK, opts.pipelining, outcome.short if outcome.finished else [],
                       wall_seconds=round(wall, 2))
    paths = report.write(rep, records, tmp / "reports")
    print(f"rehearsal rollout: {wall:.1f} s wall; stages (s): "
          f"{json.dumps({k: {s: round(v, 1) for s, v in b.durations.items()} for k, b in state.batches.items()})}")
    env = slurm.cli().env()
    yield {"lab": lab, "slots": slots, "outcome": outcome, "state": state, "cut": cut, "report": rep,
           "report_json": next(p for p in paths if p.name == "rollout.json"), "journal": state_dir / "journal.jsonl",
           "state_dir": state_dir, "bom": bom, "hosts": hosts, "env": env, "settings": settings, "pool": pool}


def _reachable(r) -> list[str]:
    return [s for s in r["slots"] if s != CUT]


def test_site_yml_converged_every_host_over_ssh(rollout):
    state, lab, bom = rollout["state"], rollout["lab"], rollout["bom"]
    for slot in rollout["slots"]:  # every host went through configure (the cut one later lost its link)
        stages = [stage for stage, _, _ in state.nodes[slot].history]
        assert "configured" in stages, (slot, state.nodes[slot].history)
    pinned = bom.component_versions(OS)
    for slot in rollout["slots"]:  # what the roles did, read on each host's own filesystem
        root = lab.hosts[slot].root
        assert (root / "etc/munge/munge.key").read_text() == CANARY  # the slurm group's role ran
        assert (root / "etc/nccl.conf").is_file()
        facts = json.loads(chroot(root, "/etc/ansible/facts.d/gpufleet.fact"))["versions"]
        for key in ("nvidia_driver", "nccl", "aws_ofi_nccl", "efa_installer", "dcgm", "containerd"):
            assert facts[key] == pinned[key], (slot, key)


def test_the_cut_host_ends_unreachable_and_quarantined(rollout):
    state, outcome = rollout["state"], rollout["outcome"]
    assert rollout["cut"], f"{CUT} was never cut"
    node = state.nodes[CUT]
    assert node.stage is NodeStage.QUARANTINED and node.reason_code == STAGE_CODE[HostStatus.UNREACHABLE]
    assert not any(stage == "preflight" for stage, _, _ in node.history), node.history  # no bundle came back
    # no spares on static hosts: the rollout finished one slot short, and nothing halted
    assert outcome.finished and not outcome.halted and outcome.short == [CUT] and outcome.spares_exhausted


def test_slurm_drains_the_cut_host_with_its_reason(rollout):
    shown = sh("scontrol", "-o", "show", "node", CUT, env=rollout["env"])
    assert "DRAIN" in shown.split("State=")[1].split()[0], shown
    assert shown.split("Reason=")[1].startswith("gpufleet quarantine unreachable: "), shown
    node = rollout["pool"].state().nodes[CUT]  # and the adapter reads it back as such
    assert node.state is PoolNodeState.QUARANTINED and node.reason_code == "unreachable"


def test_the_seven_others_are_admitted_and_idle_in_their_partition(rollout):
    state, env = rollout["state"], rollout["env"]
    reachable = _reachable(rollout)
    assert sorted(s for s, n in state.nodes.items() if n.stage is NodeStage.ADMITTED) == reachable
    deadline = time.monotonic() + 30  # a node may read idle* for a moment after its RESUME
    while True:
        rows = dict(line.split("|", 1) for line in sh("sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N|%T",
                                                      env=env).split())
        if all(rows.get(s) == "idle" for s in reachable) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {s: rows.get(s) for s in reachable} == {s: "idle" for s in reachable}
    assert rows[CUT].startswith("drain"), rows
    pooled = rollout["pool"].state().nodes  # Slurm holds each node's admission: its record's digest
    assert {s: pooled[s].record_digest for s in reachable} == {s: state.nodes[s].record_digest for s in reachable}
    assert all(pooled[s].state is PoolNodeState.ADMITTED and state.nodes[s].record_digest for s in reachable)


def test_the_baselines_ran_through_srun_on_the_hosts(rollout):
    lab, settings = rollout["lab"], rollout["settings"]
    healthy = healthy_multi_busbw(settings.sku)
    for slot in _reachable(rollout):
        steps = (lab.hosts[slot].root / "opt/nccl-tests/steps.log").read_text().splitlines()
        assert steps and all(line.startswith(f"{slot} rank ") for line in steps), steps  # ran in its namespace
        assert all(slot in line.split(" nodes ")[1].split(",") for line in steps)
    assert not (lab.hosts[CUT].root / "opt/nccl-tests/steps.log").exists()
    journal = [json.loads(line) for line in rollout["journal"].read_text().splitlines()]
    network = [e for e in journal if e["type"] == "network"]
    assert sorted(e["batch"] for e in network) == [1, 2], [e.get("skipped") for e in network]
    runs = [run for e in network for scale in e["scales"].values() for run in scale]
    assert runs and all(r["measured"] and r["passed"] for r in runs), runs
    assert all(abs(r["busbw_gbs"] - healthy) < 0.1 * healthy for r in runs), [r["busbw_gbs"] for r in runs]
    assert CUT not in {n for r in runs for n in r["nodes"]}
    assert {2, 4} <= {len(r["nodes"]) for r in runs}  # pairs, and the larger scales of batch 2


def test_the_bundles_are_what_the_hosts_printed(rollout):
    bom, state, hosts = rollout["bom"], rollout["state"], rollout["hosts"]
    for slot in _reachable(rollout):
        folder = rollout["state_dir"] / state.nodes[slot].bundle
        expected = synth.node_files(node_spec(hosts[slot], bom))
        for name in (B.QUERY_GPU, B.SMI_Q, B.DCGM_DIAG, B.NCCL_INTRA, B.NCCL_EFA_LOOPBACK, B.FI_INFO):
            assert (folder / name).read_text() == expected[name], (slot, name)
        manifest = json.loads((folder / B.MANIFEST).read_text())
        assert manifest["slot"] == slot and manifest["collected_by"] == "preflight.yml"
        assert manifest["instance_type"] == INSTANCE_TYPE and manifest["stack"] == STACK
        assert manifest["batch"] == hosts[slot].batch


def test_the_real_gates_admitted_every_reachable_host(rollout):
    state, bom = rollout["state"], rollout["bom"]
    for slot in _reachable(rollout):
        r = AdmissionRecord.model_validate(state.nodes[slot].record)
        assert r.action is Action.ADMIT, (slot, r.reason_codes, r.message)
        assert r.bom_digest == bom.digest() and r.instance_type == INSTANCE_TYPE and r.stack == STACK
        assert r.instance_id == rollout["hosts"][slot].instance_id
        compared = {c.check_id for c in r.checks if c.check_id.startswith("versions.")}
        assert {"versions.nvidia_driver", "versions.cuda", "versions.nccl", "versions.slurm"} <= compared, compared


def test_the_report_agrees_with_the_journal(rollout):
    rep, state = rollout["report"], rollout["state"]
    written = json.loads(rollout["report_json"].read_text())
    assert written["admitted_nodes"] == rep.admitted_nodes == 7 and written["target_nodes"] == 8
    assert written["admitted_gpus"] == 7 * 8 and written["short"] == [CUT]
    assert [(q["slot"], q["reason_code"], q["replaced"]) for q in written["quarantined"]] == [
        (CUT, "unreachable", False)]
    assert written["status"] == rep.status == "short"
    assert [(p["name"], p["units_available"], p["units_planned"]) for p in written["partitions"]] == [(PARTITION, 7, 8)]
    journaled = {s: n.stage.value for s, n in state.nodes.items()}
    assert journaled == {**{s: "admitted" for s in _reachable(rollout)}, CUT: "quarantined"}
