"""The storage and network base checks on real hosts: `playbooks/acceptance.yml` through the
stack's Executor, its per-host results turned into the stage's bundle.

Why here and not in the playbook: the commands come from one place (`gpufleet.gates.acceptance`
builds fio's, this module the network tools'), so the simulator, the tests and the real hosts
run the same lines; the play only runs them in lockstep and reports outputs, exit codes and
times, and this module lays them out as the bundle the parsers read (BUNDLE.md, "Acceptance
bundles"): one fio document per test with every client's jobs merged (the file system's
throughput is the sum over the clients), one file per tool and sampled pair.
A storage test that did not run on every client is left out of the bundle (its check says
"not collected" and names the file) rather than judged on fewer clients than the floor assumes.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from gpufleet.errors import ProvisioningError
from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import FileRecord, Manifest, write_bundle
from gpufleet.gates.parsers.fio import merge_outputs
from gpufleet.ports import HostStatus, Instance, StageResult
from gpufleet.spec import AcceptanceConfig

PLAYBOOK = "acceptance.yml"
STORAGE, NETWORK = "storage", "network"
RETRIES = 10  # a client tries again while its server is not listening yet (one second apart)


class PlaybookRunner(Protocol):
    """Runs a project playbook over instances (`gpufleet.configure.executor.AnsibleExecutor`)."""

    def run_playbook(self, stage: str, instances: Sequence[Instance], playbook: str,
                     extravars: Mapping[str, Any]) -> StageResult: ...


@dataclass(frozen=True)
class NetworkTools:
    """How the network stage runs its tools; the defaults are a production EFA run."""

    provider: str = "efa"  # libfabric provider of fi_pingpong / fi_rma_bw (tcp where there is no EFA)
    iperf3_port: int = 5201
    iperf3_seconds: int = 10
    iperf3_streams: int = 8  # EC2 caps one flow at 5-10 Gbit/s (infra/gpufleet/gates/acceptance.py)
    # iperf3 -b per stream ("" = unpaced, what a real link's bandwidth check wants). A veth between
    # namespaces on a busy host reorders an unpaced flow across CPUs and counts spurious retransmits.
    iperf3_stream_rate: str = ""
    ping_count: int = 20
    ping_interval_s: float = 0.2
    fabric_iterations: int = 1000
    fabric_sizes: str = "all"  # fi_pingpong -S
    rma_bw: bool = True  # fi_rma_bw ships with fabtests (the EFA installer), not with Debian's libfabric-bin


def retried(argv: Sequence[str], tries: int = RETRIES) -> str:
    """`argv` as a shell line that runs again (up to `tries`) while it fails, printing only the
    last attempt's output: a client may start before its server listens."""
    cmd = shlex.join(argv)
    return (f"for i in $(seq {tries}); do out=$({cmd} 2>&1); rc=$?; [ $rc -eq 0 ] && break; sleep 1; done; "
            f'printf "%s\\n" "$out"; exit $rc')


def network_commands(address: str, tools: NetworkTools) -> tuple[dict[str, str], dict[str, str]]:
    """(the server's commands, the client's commands against the server at `address`)."""
    fab = ["-p", tools.provider, "-e", "rdm", "-I", str(tools.fabric_iterations)]
    # servers run in the background under `timeout` (acceptance.yml): one whose client never
    # comes is gone after gpufleet_acceptance_server_s, not left listening on the node
    server = {"iperf3": shlex.join(["iperf3", "-s", "-1", "-p", str(tools.iperf3_port)]),
              "pingpong": shlex.join(["fi_pingpong", *fab, "-S", tools.fabric_sizes]),
              "rma_bw": shlex.join(["fi_rma_bw", *fab, "-o", "write"]) if tools.rma_bw else ""}
    pace = ["-b", tools.iperf3_stream_rate] if tools.iperf3_stream_rate else []
    client = {"iperf3": retried(["iperf3", "-c", address, "-p", str(tools.iperf3_port), "-t", str(tools.iperf3_seconds),
                                 "-P", str(tools.iperf3_streams), *pace, "-J"]),
              "ping": shlex.join(["ping", "-c", str(tools.ping_count), "-i", f"{tools.ping_interval_s:g}", address]),
              "pingpong": retried(["fi_pingpong", *fab, "-S", tools.fabric_sizes, address]),
              "rma_bw": retried(["fi_rma_bw", *fab, "-o", "write", address]) if tools.rma_bw else ""}
    return server, client


class PlaybookAcceptanceCollector:
    """`AcceptanceCollector` for the storage and network stages of a real stack."""

    def __init__(self, runner: PlaybookRunner, inventory: Callable[[], Mapping[str, Instance]], mount: str,
                 cfg: AcceptanceConfig, checkpoint_bytes: int, tools: NetworkTools = NetworkTools(),
                 fio_size: str = "4G", fio_runtime_s: int = 60, metadata_files: int = 2000) -> None:
        self.runner, self.inventory, self.cfg, self.tools = runner, inventory, cfg, tools
        self.directory = f"{mount.rstrip('/')}/gpufleet-acceptance"
        self.checkpoint_bytes, self.fio_size, self.fio_runtime_s = checkpoint_bytes, fio_size, fio_runtime_s
        self.metadata_files = metadata_files

    def collect(self, stage: str, nodes: Sequence[str], pairs: Sequence[tuple[str, str]], out: Path) -> Path:
        if stage not in (STORAGE, NETWORK):
            raise ValueError(f"the acceptance playbook collects the storage and network stages, not {stage!r}")
        wanted = list(nodes) if stage == STORAGE else [n for p in pairs for n in p]
        instances = self._instances(wanted)
        plan = self._storage_plan(instances) if stage == STORAGE else self._network_plan(instances, pairs)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        results_dir = Path(tempfile.mkdtemp(prefix=f".{stage}-results-", dir=Path(out).parent))
        try:
            result = self.runner.run_playbook(
                f"acceptance-{stage}", list(instances.values()), PLAYBOOK,
                {"gpufleet_acceptance_stage": stage, "gpufleet_acceptance_plan": plan,
                 "gpufleet_acceptance_out": str(results_dir)})
            per_host = {slot: self._read(results_dir / f"{slot}.json") for slot, h in result.hosts.items()
                        if h.status is HostStatus.OK}
        finally:
            shutil.rmtree(results_dir, ignore_errors=True)
        files, records = (self._storage_bundle(per_host, list(instances)) if stage == STORAGE
                          else self._network_bundle(per_host, pairs))
        return write_bundle(out, files, Manifest(slot=f"acceptance-{stage}", collected_by=PLAYBOOK, files=records))

    # --- what each host runs ------------------------------------------------------------------

    def _instances(self, slots: Sequence[str]) -> dict[str, Instance]:
        up = self.inventory()
        missing = [s for s in slots if s not in up]
        if missing:
            raise ProvisioningError(f"the acceptance base checks run on {len(slots)} host(s) and "
                                    f"{len(missing)} are not up: {', '.join(missing[:10])}")
        return {s: up[s] for s in slots}

    def _storage_plan(self, instances: Mapping[str, Instance]) -> dict[str, Any]:
        clients = len(instances)
        plan = {}
        for slot in instances:
            directory = f"{self.directory}/{slot}"
            commands = A.fio_commands(directory, 1, self.checkpoint_bytes // clients,
                                      max(1, self.cfg.checkpoint_shards // clients), size=self.fio_size,
                                      runtime_s=self.fio_runtime_s, metadata_files=self.metadata_files)
            plan[slot] = {"dir": directory, "fio": {name: shlex.join(argv) for name, argv in commands.items()}}
        return plan

    def _network_plan(self, instances: Mapping[str, Instance],
                      pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        plan: dict[str, Any] = {}
        for a, b in pairs:
            if a in plan or b in plan:
                raise ValueError(f"pair {a}--{b} shares a node with another pair: the sampled pairs must be disjoint")
            address = instances[b].private_ip
            if not address:
                raise ProvisioningError(f"{b} has no private address for its peer {a} to reach")
            server, client = network_commands(address, self.tools)
            plan[b], plan[a] = {"server": server}, {"client": client}
        return plan

    # --- the bundle -----------------------------------------------------------------------------

    @staticmethod
    def _read(path: Path) -> dict[str, dict[str, Any]]:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def _storage_bundle(self, per_host: Mapping[str, Mapping[str, dict]], clients: Sequence[str]
                        ) -> tuple[dict[str, str], dict[str, FileRecord]]:
        files, records = {}, {}
        for name in A.STORAGE_FILES:
            found = [per_host.get(c, {}).get(name) for c in clients]
            runs = [r for r in found if r is not None]
            if len(runs) < len(clients):
                continue  # not on every client: not collected, never judged on fewer clients
            files[name] = merge_outputs([r["output"] for r in runs])
            records[name] = _record(runs, f"on {len(runs)} clients at once: {runs[0]['command']}")
        return files, records

    @staticmethod
    def _network_bundle(per_host: Mapping[str, Mapping[str, dict]], pairs: Sequence[tuple[str, str]]
                        ) -> tuple[dict[str, str], dict[str, FileRecord]]:
        files, records = {}, {}
        for a, b in pairs:
            for tool, name in A.pair_files(a, b).items():
                run = per_host.get(a, {}).get(tool)
                if run is not None:
                    files[name] = run["output"]
                    records[name] = _record([run], f"on {a}: {run['command']}")
        return files, records


def _record(runs: Sequence[Mapping[str, Any]], command: str) -> FileRecord:
    codes = [r.get("exit_code") for r in runs]
    starts = [_time(r.get("started")) for r in runs]
    ends = [_time(r.get("ended")) for r in runs]
    return FileRecord(command=command, exit_code=next((c for c in codes if c), codes[0] if codes else None),
                      started=min((t for t in starts if t), default=None), ended=max((t for t in ends if t), default=None))


def _time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None
