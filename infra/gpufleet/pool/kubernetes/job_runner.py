"""Runs one Indexed Job launch (`smoke_job.SmokeObjects`) to its end and hands back its raw output.

Create the Job, then its ConfigMap and Service owned by it (the Job's uid exists only once it is
created: an interrupted run leaves nothing the garbage collector does not remove with the Job);
poll the Job until it completes, fails or the deadline passes; read every pod's log in index
order, each under a `# pod ...` line saying which node it ran on and how it ended (the parsers
skip such lines; a reader of the bundle sees which rank's node failed, or why a pod never ran);
delete what was created, whatever happened. A failed or late run is a result (exit code, output),
never an exception: judging it is the gates' call. API failures raise `PoolError` (`KubeApi`
retries transient ones first).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

from gpufleet.errors import PoolError
from gpufleet.pool.kubernetes.adapter import TIMEOUT_EXIT
from gpufleet.pool.kubernetes.adapter import _exit_code as terminated_exit_code
from gpufleet.pool.kubernetes.api import KubeApi
from gpufleet.pool.kubernetes.manifests import SYSTEM_NAMESPACE
from gpufleet.pool.kubernetes.retry import Conflict
from gpufleet.pool.kubernetes.smoke_job import JOB_LABEL, SmokeObjects, owned_by, pod_index
from gpufleet.pool.protocol import LaunchResult

class IndexedJobRunner:
    def __init__(self, api: KubeApi, *, namespace: str = SYSTEM_NAMESPACE, poll_s: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.api, self.namespace, self.poll_s = api, namespace, poll_s
        self.sleep, self.clock, self.now = sleep, clock, now

    def run(self, objects: SmokeObjects, slots: Sequence[str], timeout_s: float) -> LaunchResult:
        """`slots`: the nodes the result names (the Job is pinned to their Nodes already)."""
        name = objects.job["metadata"]["name"]
        started = self.now()
        deadline = self.clock() + timeout_s
        created: list[tuple[str, str]] = []  # listed before each POST: one that landed unanswered is deleted too
        try:
            created.append(("Job", name))
            owner = self._create_job(objects.job)
            if owner is None:
                created.pop()  # not ours to delete
                raise PoolError(f"Job {self.namespace}/{name} exists and is not this launch's (a launch name "
                                "must be new)")
            for kind, obj, create in (("ConfigMap", objects.configmap, self.api.create_configmap),
                                      ("Service", objects.service, self.api.create_service)):
                created.append((kind, obj["metadata"]["name"]))
                try:
                    create(self.namespace, owned_by(obj, owner))
                except Conflict:
                    pass  # a retried POST whose first attempt landed: the launch's names are its own
            job = self._wait(name, deadline)
            verdict = finished(job) if job is not None else None
            pods = latest_by_index(self.api.list_pods(self.namespace, f"{JOB_LABEL}={name}"))
            output = "".join(self._section(i, pod) for i, pod in pods)
            if not pods:
                output = f"# job {name}: no pod was created ({condition_summary(job)})\n"
            code = exit_code(verdict, [pod for _, pod in pods])
        except BaseException:
            self._delete(created, quiet=True)
            raise
        self._delete(created, quiet=False)
        return LaunchResult(name=name, nodes=tuple(slots), exit_code=code, output=output, started=started,
                            ended=self.now(), command=objects.command)

    def _create_job(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The created Job (its uid owns the rest). A 409 on a name new to this launch is this
        launch's own POST that landed before a retry: the Job is read instead. None: a Job of that
        name exists that this launch did not make (its label or command differ; the API server
        fills in defaults, so the whole template is not compared)."""
        name = body["metadata"]["name"]
        try:
            return self.api.create_job(self.namespace, body)
        except Conflict:
            job = self.api.read_job(self.namespace, name)
            return job if job is not None and _launch_of(job) == _launch_of(body) else None

    def _wait(self, name: str, deadline: float) -> dict[str, Any] | None:
        """The Job once it has finished, or as it stands at the deadline (None: it is gone)."""
        while True:
            job = self.api.read_job(self.namespace, name)
            if job is None or finished(job) is not None or self.clock() >= deadline:
                return job
            self.sleep(min(self.poll_s, max(0.0, deadline - self.clock())))

    def _section(self, index: int, pod: Mapping[str, Any]) -> str:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        started = _started(pod)
        log = self.api.pod_log_if_any(self.namespace, meta["name"]) if started else None
        head = (f"# pod {meta['name']} (index {index}, node {spec.get('nodeName') or 'none'}): "
                f"{pod_summary(pod)}\n")
        body = log if log is not None else \
            f"# (no log: {'the pod is gone' if started else 'the container never started'})\n"
        return head + body + ("" if body.endswith("\n") else "\n")

    def _delete(self, created: Sequence[tuple[str, str]], quiet: bool) -> None:
        """Delete in reverse order, each attempted; the first failure raises after all were tried
        (`quiet`: never, another exception is on its way)."""
        delete = {"Job": self.api.delete_job, "ConfigMap": self.api.delete_configmap,
                  "Service": self.api.delete_service}
        failed: list[str] = []
        for kind, name in reversed(created):
            try:
                delete[kind](self.namespace, name)
            except PoolError as exc:
                failed.append(f"{kind} {name}: {exc}")
        if failed and not quiet:
            raise PoolError(f"could not delete what the launch created in {self.namespace} ({'; '.join(failed)}); "
                            f"the API server removes them with the Job after its ttlSecondsAfterFinished")


def finished(job: Mapping[str, Any]) -> str | None:
    """"Complete" or "Failed" once the Job controller says so (a True condition), else None.
    Not SuccessCriteriaMet/FailureTarget (1.31+): they come while pods may still be running."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return None


def latest_by_index(pods: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """One pod per completion index (the newest, should the controller have replaced one), by index."""
    chosen: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        index = pod_index(pod)
        if index is None:
            continue
        have = chosen.get(index)
        if have is None or _created(pod) > _created(have):
            chosen[index] = pod
    return sorted(chosen.items())


def exit_code(verdict: str | None, pods: Sequence[Mapping[str, Any]]) -> int:
    """0 for a complete Job; a failed one's first non-zero container exit code, by index (else 1);
    TIMEOUT_EXIT when it had not finished by the deadline."""
    if verdict is None:
        return TIMEOUT_EXIT
    if verdict == "Complete":
        return 0
    codes = [c for c in map(terminated_exit_code, pods) if c]
    return codes[0] if codes else 1


def pod_summary(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    phase = status.get("phase") or "Unknown"
    code = terminated_exit_code(pod)
    if code is not None:
        return f"{phase}, exit {code}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"{phase}, waiting: {waiting.get('reason', '')} {waiting.get('message', '')}".rstrip()
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{phase}, not scheduled: {cond.get('reason', '')} {cond.get('message', '')}".rstrip()
    return phase


def condition_summary(job: Mapping[str, Any] | None) -> str:
    if job is None:
        return "the Job is gone"
    conds = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    if not conds:
        return "the Job reports no condition"
    last = conds[-1]
    return f"{last.get('type')}: {last.get('reason', '')} {last.get('message', '')}".rstrip()


def _launch_of(job: Mapping[str, Any]) -> tuple[Any, Any]:
    template = job["spec"]["template"]
    return (template["metadata"].get("labels") or {}).get(JOB_LABEL), template["spec"]["containers"][0]["command"]


def _started(pod: Mapping[str, Any]) -> bool:
    return any({"running", "terminated"} & set(cs.get("state") or {})
               for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def _created(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("creationTimestamp") or ""
