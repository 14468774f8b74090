"""A rollout batch rehearsed over real transport: 8 hosts, real SSH, the real playbooks, the real gates.

Each host is a network namespace on a private bridge running its own sshd, which chroots every
session into the host's overlay of the Debian base (netns_lab.py). Through the Executor port over
ansible-runner (infra.configure.executor):

1. the real `site.yml` converges every host from the local apt repository of dummy packages
   pinned to images/bom.yaml (the same repository the chroot role tests use), over SSH;
2. the hosts then get their "hardware": stub GPU tools that print what `infra.gates.synth`
   renders for that node in the real tools' formats (nvidia-smi, dcgmi, fi_info, nccl-tests ...,
   and every version command the preflight runs), /proc/driver/nvidia/version included;
3. the real `preflight.yml` collects the bundles over SSH; one host is cut (its link taken down)
   while its DCGM diagnostic runs;
4. the real gates (`infra.gates.evaluate.gate_cohort`, with the BOM's version expectations for
   the stack's OS and pool) decide on the bundles that came back.

The seven reachable hosts are admitted; the cut host ends unreachable, with no bundle, and is
what the orchestrator quarantines (`infra.rollout.orchestrator.STAGE_CODE`). The orchestrator
itself, the Slurm pool and the multi-node baselines are not driven here: the baselines need a
launcher whose jobs run on these hosts, which the local Slurm (its slurmds on this machine) is not.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import pytest

from apt_fixture_repo import build_repo, install_into, local_site_vars
from configure_host import PROJECT_ROOT, chroot, ensure_system_packages, require_root
from netns_lab import NetnsLab
from node_stubs import dispatch, install_outputs, install_tool
from infra.bom import load_bom
from infra.configure.executor import AnsibleExecutor
from infra.configure.inventory import SshConnection
from infra.configure.runner import AnsibleConfigurator
from infra.gates import bundle as B
from infra.gates import synth
from infra.gates import versions as gate_versions
from infra.gates.evaluate import gate_cohort
from infra.gates.settings import GateSettings
from infra.gates.verdict import Action
from infra.rollout.orchestrator import STAGE_CODE
from infra.rollout.ports import HostStatus, Instance
from infra.spec import GatesConfig

pytestmark = [pytest.mark.requires_root, pytest.mark.slow]

OS = "ubuntu-22.04"
POOL = "slurm"
INSTANCE_TYPE = "p5.48xlarge"
SLOTS = [f"b1-n{i:03d}" for i in range(8)]
CUT = "b1-n005"  # goes dark during its DCGM diagnostic
CANARY = "gpufleet-rehearsal-munge-key"
STACK = "rehearsal"


def node_spec(slot: str, bom) -> synth.NodeSpec:
    return synth.NodeSpec(slot=slot, instance_type=INSTANCE_TYPE, instance_id=f"i-0{SLOTS.index(slot):016x}",
                          versions=synth.bom_versions(bom, OS), batch=1, stack=STACK, os=OS)


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


def install_hardware(root: Path, n: synth.NodeSpec) -> None:
    """The node's GPU tools and version sources, printing what synth renders for `n`."""
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
    install_tool(root, f"{bin_}/docker", dispatch({'"run --rm --gpus all "*" nvidia-smi -L"': B.CONTAINER_GPUS}))
    # the cut host's diagnostic runs long enough to be cut during it
    diag = f"!sleep {30 if n.slot == CUT else 1}; cat /srv/gpufleet-stubs/{B.DCGM_DIAG}"
    install_tool(root, f"{bin_}/dcgmi", dispatch({'"diag -r "*" -j"': diag, "--version": "version-dcgm"}))
    install_tool(root, "/opt/nccl-tests/build/all_reduce_perf",
                 f'[ "$NCCL_P2P_DISABLE" = 1 ] && exec cat /srv/gpufleet-stubs/{B.NCCL_EFA_LOOPBACK}\n'
                 f"cat /srv/gpufleet-stubs/{B.NCCL_INTRA}")
    # fi_info: the EFA installer (site.yml) put its own under /opt/amazon/efa/bin, first on the PATH
    install_tool(root, "/opt/amazon/efa/bin/fi_info", dispatch({'"-p efa"*': B.FI_INFO, "--version": "version-libfabric"}))
    for tool, key in (("nv-fabricmanager", "fabric_manager"), ("nvcc", "cuda"), ("containerd", "containerd"),
                      ("nvidia-ctk", "nvidia_container_toolkit"), ("lfs", "lustre_client"), ("slurmd", "slurm")):
        install_tool(root, f"{bin_}/{tool}", f"cat /srv/gpufleet-stubs/version-{key}")
    install_tool(root, f"{bin_}/modinfo", dispatch({'"-F version gdrdrv"': "!" + f"echo {n.versions['gdrcopy']}"}))
    install_tool(root, f"{bin_}/uname", dispatch({"-r": "version-kernel", "*": '!exec /bin/uname "$@"'}))
    install_tool(root, f"{bin_}/strings", 'tr -c "[:print:]" "\\n" < "$1" | grep -E ".{4,}"')
    lib = root / "usr/lib/x86_64-linux-gnu" / f"libnccl.so.{n.versions['nccl']}"
    lib.write_bytes(b"\x7fELF")
    ofi = root / "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    ofi.parent.mkdir(parents=True, exist_ok=True)
    ofi.write_bytes(b"\x7fELF\x00\x01" + version["aws_ofi_nccl"].encode() + b"\x00")
    (root / "etc/os-release").unlink(missing_ok=True)
    (root / "etc/os-release").write_text(synth.OS_RELEASE[OS])


@pytest.fixture(scope="module")
def fleet(base_rootfs, collections_dir, tmp_path_factory):
    require_root("network namespaces with sshd")
    ensure_system_packages("openssh-server", "openssh-client", "iproute2")
    tmp = tmp_path_factory.mktemp("rehearsal")
    bom = load_bom()
    repo = build_repo(bom, OS, tmp / "repo", tmp)
    with NetnsLab(tmp / "lab") as lab:
        for slot in SLOTS:
            n = node_spec(slot, bom)
            root = lab.overlay_root(slot, [base_rootfs])
            install_into(root, bom, OS, tmp, prebuilt=repo)
            (root / "srv/canary-secret.b64").write_text(base64.b64encode(CANARY.encode()).decode() + "\n")
            # /proc/driver/nvidia/version: bound before sshd starts (its mount namespace sees only
            # the mounts made before it)
            driver = lab.roots_dir / f"{slot}-proc-driver"
            (driver / "nvidia").mkdir(parents=True)
            (driver / "nvidia/version").write_text(synth.version_output("nvidia_driver", n.versions["nvidia_driver"])[0])
            lab.mount("--bind", str(driver), str(root / "proc/driver"))
            lab.add_host(slot, root=root)
        instances = [Instance(slot=s, instance_id=node_spec(s, bom).instance_id, batch=1, block=0,
                              private_ip=lab.hosts[s].address) for s in SLOTS]
        runner = AnsibleConfigurator(tmp / "state", playbook_dir=PROJECT_ROOT / "playbooks",
                                     collections=collections_dir, forks=len(SLOTS))
        executor = AnsibleExecutor(runner, SshConnection(user="root", private_key_file=lab.key, connect_timeout_s=3),
                                   local_site_vars(bom, OS, INSTANCE_TYPE), groups=(POOL,),
                                   context={"gpufleet_stack": STACK, "gpufleet_instance_type": INSTANCE_TYPE,
                                            "ansible_python_interpreter": "/usr/bin/python3"})
        timings: dict[str, float] = {}
        started = time.monotonic()
        configured = executor.configure(instances)
        timings["configure"] = time.monotonic() - started
        for slot in SLOTS:
            install_hardware(lab.hosts[slot].root, node_spec(slot, bom))
        cut = _cut_during_diag(lab, executor)
        started = time.monotonic()
        collected = executor.preflight(instances, tmp / "bundles")
        timings["preflight"] = time.monotonic() - started
        ok = [tmp / "bundles" / s for s in collected.ok()]
        settings = GateSettings.from_config(GatesConfig(), INSTANCE_TYPE, bom_digest=bom.digest(), pool=POOL,
                                            expected_by_os=gate_versions.expectations_by_os(bom, POOL, OS))
        started = time.monotonic()
        records = gate_cohort([B.read_bundle(p) for p in ok], settings, instance_type=INSTANCE_TYPE)
        timings["gates"] = time.monotonic() - started
        print(f"rehearsal timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        yield {"lab": lab, "configured": configured, "collected": collected, "cut": cut, "records": records,
               "bundles": tmp / "bundles", "bom": bom, "timings": timings}


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


def test_site_yml_converges_every_host_over_ssh(fleet):
    configured = fleet["configured"]
    assert configured.ok() == SLOTS, configured.not_ok()
    assert all(h.duration_s > 0 for h in configured.hosts.values())
    lab, bom = fleet["lab"], fleet["bom"]
    pinned = bom.component_versions(OS)
    for slot in SLOTS:  # what the roles did, read on each host's own filesystem
        root = lab.hosts[slot].root
        assert (root / "etc/munge/munge.key").read_text() == CANARY  # the slurm group's role ran
        assert (root / "etc/nccl.conf").is_file()
        facts = json.loads(chroot(root, "/etc/ansible/facts.d/gpufleet.fact"))["versions"]
        for key in ("nvidia_driver", "nccl", "aws_ofi_nccl", "efa_installer", "dcgm", "containerd"):
            assert facts[key] == pinned[key], (slot, key)


def test_the_cut_host_is_unreachable_and_brings_no_bundle(fleet):
    collected, cut = fleet["collected"], fleet["cut"]
    assert cut, f"{CUT} was never cut"
    assert collected.hosts[CUT].status is HostStatus.UNREACHABLE, collected.hosts[CUT]
    assert STAGE_CODE[collected.hosts[CUT].status] == "unreachable"  # the orchestrator's quarantine reason
    assert not (fleet["bundles"] / CUT).exists()
    assert collected.ok() == [s for s in SLOTS if s != CUT], collected.not_ok()


def test_the_bundles_are_what_the_hosts_printed(fleet):
    bom = fleet["bom"]
    for slot in (s for s in SLOTS if s != CUT):
        folder = fleet["bundles"] / slot
        expected = synth.node_files(node_spec(slot, bom))
        for name in (B.QUERY_GPU, B.SMI_Q, B.DCGM_DIAG, B.NCCL_INTRA, B.NCCL_EFA_LOOPBACK, B.FI_INFO):
            assert (folder / name).read_text() == expected[name], (slot, name)
        manifest = json.loads((folder / B.MANIFEST).read_text())
        assert manifest["slot"] == slot and manifest["collected_by"] == "preflight.yml"
        assert manifest["instance_type"] == INSTANCE_TYPE and manifest["stack"] == STACK and manifest["batch"] == 1


def test_the_real_gates_admit_every_reachable_host(fleet):
    records = {r.slot: r for r in fleet["records"]}
    assert sorted(records) == [s for s in SLOTS if s != CUT]
    refused = {s: (r.action.value, r.reason_codes, r.message) for s, r in records.items() if r.action is not Action.ADMIT}
    assert not refused, refused
    bom = fleet["bom"]
    for r in records.values():
        assert r.bom_digest == bom.digest() and r.instance_type == INSTANCE_TYPE
        compared = {c.check_id for c in r.checks if c.check_id.startswith("versions.")}
        assert {"versions.nvidia_driver", "versions.cuda", "versions.nccl", "versions.slurm"} <= compared, compared
