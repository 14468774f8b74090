"""The full gates for nodes joining a live pool one by one or a group at a time: configure,
preflight, the per-node gates (one remediation and retest, as in a rollout), then the multi-node
baselines with admitted partners. Decides nothing of its own: the gates' pure functions do.

Why not the rollout's orchestrator: it works batch by batch over the rollout journal and its plan;
a replaced slot or an upgrade group is a handful of nodes in an already-running pool. The stages
and the rules are the same (`gate_cohort`, `run_network_gates`, `apply_isolation`,
`remediation_for` are the rollout's own), only the bookkeeping differs.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gpufleet.gates import bundle as B
from gpufleet.gates.admission import AdmissionRecord, apply_isolation
from gpufleet.gates.evaluate import gate_cohort
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import Action, NodeOutcome
from gpufleet.rollout import baselines as bl
from gpufleet.rollout.batch_stages import remediation_for
from gpufleet.ports import HostStatus, Instance, StageResult
from gpufleet.rollout.run_config import Adapters


@dataclass
class Verdicts:
    """Each node's outcome: an admission record to admit with, or why it failed."""

    admit: dict[str, AdmissionRecord] = field(default_factory=dict)
    failed: dict[str, tuple[str, str, AdmissionRecord | None]] = field(default_factory=dict)  # code, reason, record
    runs: list[dict[str, Any]] = field(default_factory=list)  # the multi-node runs (bl.MultiNodeRun as JSON)
    seconds: float = 0.0  # modelled or measured time of the stages, in order

    def multi_node_median(self) -> float | None:
        values = sorted(r["busbw_gbs"] for r in self.runs if r.get("measured") and r.get("busbw_gbs") is not None)
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _failures(result: StageResult, todo: Sequence[Instance], failed_code: str) -> dict[str, tuple[str, str, None]]:
    out: dict[str, tuple[str, str, None]] = {}
    for inst in todo:
        h = result.hosts.get(inst.slot)
        if h is None:
            out[inst.slot] = ("unreachable", "the executor returned no result for this host", None)
        elif h.status is not HostStatus.OK:
            code = "unreachable" if h.status is HostStatus.UNREACHABLE else failed_code
            out[inst.slot] = (code, (f"task {h.task!r}: " if h.task else "") + (h.message or h.status.value), None)
    return out


def _stamp(r: AdmissionRecord, inst: Instance, stack: str) -> AdmissionRecord:
    return r.model_copy(update={"instance_id": inst.instance_id, "batch": inst.batch, "block": inst.block,
                                "stack": stack})


def gate_nodes(ports: Adapters, settings: GateSettings, instances: Sequence[Instance], partners: Sequence[str],
               work_dir: Path, stack: str, *, kind: str, message_bytes: int, configure: bool = True,
               launch_timeout_s: float = 1800.0, remediate: bool = True) -> Verdicts:
    """Take `instances` through the rollout's stages; `partners` are admitted, idle, known-good slots.
    `remediate=False`: a RETEST verdict fails at once (the remediation ladder is the remediation)."""
    out = Verdicts()
    todo = list(instances)
    if configure and todo:
        result = ports.executor.configure(todo)
        out.seconds += result.duration_s
        out.failed.update(_failures(result, todo, "configure-failed"))
        todo = [i for i in todo if i.slot not in out.failed]
    previous: dict[str, NodeOutcome] = {}
    passed: dict[str, AdmissionRecord] = {}
    for attempt in (1, 2):
        if not todo:
            break
        dest = work_dir / f"attempt-{attempt}"
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        result = ports.executor.preflight(todo, dest)
        out.seconds += result.duration_s
        out.failed.update(_failures(result, todo, "preflight-failed"))
        by_slot = {i.slot: i for i in todo if i.slot not in out.failed}
        bundles = []
        for slot in by_slot:
            try:
                bundles.append(B.read_bundle(dest / slot))
            except B.BundleError as exc:
                out.failed[slot] = ("bundle-unreadable", f"the preflight bundle cannot be read: {exc}", None)
        records = gate_cohort(bundles, settings, previous=previous, decided_at=ports.clock.now()) if bundles else []
        retest = []
        for r in records:
            r = _stamp(r, by_slot[r.slot], stack)
            if r.action is Action.ADMIT:
                passed[r.slot] = r
            elif r.action is Action.RETEST and attempt == 1 and remediate:
                outcome = ports.executor.remediate(by_slot[r.slot], remediation_for(r.reason_codes))  # type: ignore[arg-type]
                out.seconds += outcome.duration_s
                if outcome.status is not HostStatus.OK:
                    out.failed[r.slot] = ("remediation-failed", outcome.message or outcome.status.value, r)
                    continue
                previous[r.slot] = NodeOutcome(verdict=r.verdict, action=r.action, attempt=r.attempt,
                                               reason_codes=r.reason_codes, message=r.message)
                retest.append(by_slot[r.slot])
            else:
                msg = r.message if attempt == 1 else "failed again after remediation: " + r.message
                out.failed[r.slot] = (r.reason_codes[0] if r.reason_codes else "quarantined", msg, r)
        todo = retest
    if passed:
        _network(ports, settings, passed, partners, kind, message_bytes, launch_timeout_s, out)
    return out


def _network(ports: Adapters, settings: GateSettings, passed: Mapping[str, AdmissionRecord], partners: Sequence[str],
             kind: str, message_bytes: int, timeout_s: float, out: Verdicts) -> None:
    slots = sorted(passed)
    if len(slots) + len(partners) < 2:  # a one-node pool: nothing to measure with
        out.admit.update(passed)
        return
    runner = bl.NetworkRunner(ports.pool.launcher(), kind, settings, settings.expected_versions,  # type: ignore[arg-type]
                              message_bytes, timeout_s)
    result = bl.run_network_gates(runner, slots, list(partners))
    final, _net = apply_isolation([passed[s] for s in slots], result)
    out.runs.extend(r.model_dump(mode="json") for r in runner.runs)
    out.seconds += runner.seconds
    for r in final:
        if r.action is Action.ADMIT:
            out.admit[r.slot] = r
        else:
            out.failed[r.slot] = (r.reason_codes[0] if r.reason_codes else "multinode", r.message, r)


def launch_kind(pool_kind: str) -> str:
    return bl.LAUNCH_KIND.get(pool_kind, "ssh")
