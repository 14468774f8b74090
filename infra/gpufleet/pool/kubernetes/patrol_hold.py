"""The patrol's idle-node recheck as the lowest-priority Kueue workload: one hold Job per node
(`patrol_job`), preempted by any real job. The Kubernetes side of `daytwo.patrol_run.HoldsForPatrol`,
as `pool.slurm.patrol_hold` is Slurm's.

A round: create a suspended hold Job per node in its partition's operators' queue; Kueue admits
it (unsuspends it) and its pod starts on the node; a node whose hold runs within `start_s` is held,
the others' Jobs are deleted (a job took the node first, or Kueue did not admit the hold: the patrol
yields those nodes). While the patrol collects, Kueue may evict a hold for a real job (Workload
Evicted/Preempted, Job suspended, pod deleted): `lost` names those nodes, yielded too. `release`
deletes the Jobs (background propagation: their pods go with them) and waits until the pods are gone,
so the nodes read idle again. API failures raise `PoolError` (`KubeApi` retries transient ones first).

Only where the pool has the patrol's class (`gpufleet-patrol`, created with the Kueue objects) and
the stack names a workload image (pre-pulled on every node); elsewhere the patrol rechecks without
holds, re-reading the pool per round.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Mapping, Sequence

from gpufleet.errors import PoolError
from gpufleet.pool.kubernetes import patrol_job as pj
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.queues import PATROL_PRIORITY_CLASS
from gpufleet.pool.kubernetes.retry import Conflict


class KubePatrolHolds:
    def __init__(self, api: KubeApi, jobs: pj.PatrolJobs, node_names: Callable[[Sequence[str]], Mapping[str, str]], *,
                 start_s: float = 60.0, poll_s: float = 1.0, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, round_id: Callable[[], str] = lambda: uuid.uuid4().hex
                 ) -> None:
        self.api, self.jobs, self.node_names = api, jobs, node_names
        self.start_s, self.poll_s, self.sleep, self.clock, self.round_id = start_s, poll_s, sleep, clock, round_id
        self._made: dict[str, dict[str, Any]] = {}  # hold name -> the created Job (namespace, node, uid)
        self._available: bool | None = None

    def available(self) -> bool:
        """The patrol's WorkloadPriorityClass exists (404: the pool's Kueue objects predate it)."""
        if self._available is None:
            self._available = self.api.read_workload_priority_class(PATROL_PRIORITY_CLASS) is not None
        return self._available

    def _where(self, name: str) -> tuple[str, str]:
        job = self._made[name]
        return job["metadata"]["namespace"], job["spec"]["template"]["spec"]["nodeSelector"][pj.HOSTNAME_LABEL]

    def _state(self, name: str, workloads: bool = False) -> str:
        ns, node = self._where(name)
        job = self.api.read_job(ns, name)
        pods = self.api.list_pods(ns, f"{pj.HOLD_LABEL}={name}")
        uid = (job or {}).get("metadata", {}).get("uid") or self._made[name]["metadata"].get("uid")
        wls = self.api.list_workloads(ns, f"{pj.JOB_UID_LABEL}={uid}") if workloads and uid else []
        return pj.hold_state(job, pods, node, wls)

    def hold(self, partitions: Mapping[str, str]) -> dict[str, str]:
        """slot -> hold name for the slots whose hold runs within `start_s`; the others' Jobs are deleted."""
        if not partitions:
            return {}
        nodes = self.node_names(sorted(partitions))
        round_id = self.round_id()
        names: dict[str, str] = {}
        try:
            for slot, part in sorted(partitions.items()):
                name = pj.hold_name(slot, round_id)
                body = pj.hold_job(self.jobs, slot, part, nodes[slot], name)
                self._made[name] = body
                names[slot] = name
                self._made[name] = self._create(body)
            deadline = self.clock() + self.start_s
            states = {s: self._state(n) for s, n in names.items()}
            while any(v == "waiting" for v in states.values()) and self.clock() < deadline:
                self.sleep(self.poll_s)
                states = {s: (self._state(n) if states[s] == "waiting" else states[s]) for s, n in names.items()}
        except BaseException:
            self._delete(names, quiet=True)
            raise
        held = {s: n for s, n in names.items() if states[s] == "held"}
        self.release({s: n for s, n in names.items() if s not in held})
        return held

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        """The created Job; a 409 on this round's new name is this round's own POST that landed before
        a retry (the Job is read back), unless the Job there is not a patrol hold of that name."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            return self.api.create_job(ns, body) or body
        except Conflict:
            job = self.api.read_job(ns, name)
            if job is None or (job["metadata"].get("labels") or {}).get(pj.HOLD_LABEL) != name:
                raise PoolError(f"a Job {ns}/{name} that is not this patrol's hold is in the way") from None
            return job

    def lost(self, holds: Mapping[str, str]) -> list[str]:
        """The held slots whose hold no longer runs: Kueue evicted it for a real job (or it ended)."""
        return sorted(s for s, n in holds.items() if self._state(n, workloads=True) != "held")

    def release(self, holds: Mapping[str, str]) -> None:
        """Delete the hold Jobs and wait until their pods are gone, so the nodes read idle again."""
        if not holds:
            return
        self._delete(holds, quiet=False)
        deadline = self.clock() + self.start_s
        left = dict(holds)
        while True:
            left = {s: n for s, n in left.items() if self.api.list_pods(self._where(n)[0], f"{pj.HOLD_LABEL}={n}")}
            if not left:
                for n in holds.values():
                    self._made.pop(n, None)
                return
            if self.clock() >= deadline:
                raise PoolError(f"the patrol's hold pods on {', '.join(sorted(left))} were still there "
                                f"{self.start_s:g} s after their Jobs were deleted")
            self.sleep(self.poll_s)

    def _delete(self, holds: Mapping[str, str], quiet: bool) -> None:
        failed: list[str] = []
        for slot, name in sorted(holds.items()):
            if name not in self._made:
                continue
            try:
                self.api.delete_job(self._where(name)[0], name)
            except PoolError as exc:
                failed.append(f"{slot}: {exc}")
        if failed and not quiet:
            raise PoolError(f"could not delete the patrol's hold Jobs ({'; '.join(failed)}); each ends by its "
                            f"deadline ({self.jobs.hold_s} s at most)")
