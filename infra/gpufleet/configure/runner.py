"""Run a playbook over a batch of nodes with ansible-runner and say, per host, what happened.

One private data dir per run under `<state_dir>/runner/<run-id>` (artifacts stay for the
audit trail). Ansible's linear strategy already keeps going on other hosts when one fails;
this module only turns the event stream into a verdict per host (ok / failed with the task
and message / unreachable) and feeds per-host progress to a callback as events arrive.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol

from gpufleet.configure.collections import collections_path
from gpufleet.configure.inventory import Connection, Node, SshConnection, build_inventory
from gpufleet.errors import ExternalCommandFailed
from gpufleet.project import current_project


class Verdict(str, Enum):
    OK = "ok"
    FAILED = "failed"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class HostResult:
    host: str
    verdict: Verdict
    task: str | None = None
    message: str | None = None
    changed: tuple[str, ...] = ()  # tasks that changed something: empty on an idempotent rerun


@dataclass(frozen=True)
class HostProgress:
    """One host finished one task: event is ok, changed, skipped, failed or unreachable."""

    host: str
    task: str
    event: str


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str
    rc: int
    hosts: Mapping[str, HostResult]
    private_data_dir: Path

    def by_verdict(self, verdict: Verdict) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.verdict is verdict)


class RunnerBackend(Protocol):
    """`ansible_runner.run`'s shape: keyword arguments in, an object with status/rc out."""

    def __call__(self, **kwargs: Any) -> Any: ...


def _ansible_runner_run(**kwargs: Any) -> Any:
    """ansible_runner.run with the process's signal handlers kept.

    Why: called on the main thread without a cancel_callback, ansible-runner replaces the SIGINT
    and SIGTERM handlers with its own (a flag it polls) and never puts them back, so after the
    first configure a rollout ignored Ctrl-C and CI's `timeout --signal=INT` for good. During the
    run its handler still cancels the playbook cleanly; after it, ours are back, and a run that
    was cancelled by a signal stops the command as the interrupt would have."""
    import signal
    import threading

    import ansible_runner

    if threading.current_thread() is not threading.main_thread():
        return ansible_runner.run(**kwargs)  # runner installs nothing off the main thread
    signals = (signal.SIGINT, signal.SIGTERM)
    saved = {s: signal.getsignal(s) for s in signals}
    try:
        result = ansible_runner.run(**kwargs)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    if getattr(result, "status", None) == "canceled" and "cancel_callback" not in kwargs:
        raise KeyboardInterrupt("ansible-runner was cancelled by a signal")
    return result


_PROGRESS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
             "runner_on_unreachable": "unreachable"}


@dataclass
class _Collector:
    """Event handler: remembers each host's first failure or unreachability, reports progress."""

    on_progress: Callable[[HostProgress], None] | None
    seen: set[str] = field(default_factory=set)
    failed: dict[str, tuple[str, str]] = field(default_factory=dict)
    unreachable: dict[str, tuple[str, str]] = field(default_factory=dict)
    changed: dict[str, list[str]] = field(default_factory=dict)

    def __call__(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host")
        if kind in _PROGRESS and host:
            self.seen.add(host)
            task = str(data.get("task", ""))
            res = data.get("res") or {}
            name = _PROGRESS[kind]
            if kind == "runner_on_ok" and res.get("changed"):
                name = "changed"
                self.changed.setdefault(host, []).append(task)
            if kind == "runner_on_failed" and not data.get("ignore_errors"):
                self.failed.setdefault(host, (task, _message(res)))
            if kind == "runner_on_unreachable":
                self.unreachable.setdefault(host, (task, _message(res)))
            if self.on_progress:
                self.on_progress(HostProgress(host=host, task=task, event=name))
        return True


def _message(res: Mapping[str, Any]) -> str:
    """What went wrong, from a task result. A looped task's own msg only sums up its items ("All items
    completed" even when one was unreachable), so the first item that failed or was unreachable speaks."""
    items = res.get("results")
    if isinstance(items, list):
        bad = next((r for r in items if isinstance(r, Mapping) and (r.get("unreachable") or r.get("failed"))), None)
        if bad is not None:
            label = bad.get("_ansible_item_label", bad.get("item"))
            if isinstance(label, Mapping):
                label = label.get("name", label)
            inner = _message({k: v for k, v in bad.items() if k != "results"})
            return f"item {label}: {inner}"[:1000] if label not in (None, "") else inner
    msg = str(res.get("msg", "")).strip()
    stderr = str(res.get("stderr", "") or "").strip()
    if stderr and stderr not in msg:
        msg = f"{msg}: {stderr[-500:]}" if msg else stderr[-500:]
    failures = res.get("failures")  # the dnf module's "No package X available." lines: what names the package
    if isinstance(failures, list) and failures:
        msg = f"{msg}: {'; '.join(map(str, failures))}" if msg else "; ".join(map(str, failures))
    return msg[:1000] or "no message"


class AnsibleConfigurator:
    """The Executor's configure step, real flavour: ansible-runner over SSH, SSM or chroot."""

    def __init__(self, state_dir: Path, *, playbook_dir: Path | None = None,
                 collections: Path | None = None, backend: RunnerBackend = _ansible_runner_run,
                 forks: int = 50, task_timeout_s: int = 1800, run_timeout_s: int | None = None) -> None:
        self.state_dir = Path(state_dir)
        # the project's playbooks/ (site.yml, preflight.yml, roles/), unless a caller names others
        self.playbook_dir = Path(playbook_dir) if playbook_dir is not None else current_project().playbooks_dir
        self.collections = collections or collections_path()
        self.backend = backend
        self.forks = forks
        self.task_timeout_s = task_timeout_s
        self.run_timeout_s = run_timeout_s

    def envvars(self, pdd: Path, connection: Connection) -> dict[str, str]:
        env = {
            # ansible-playbook of this interpreter's venv first (runner execs it from PATH)
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "ANSIBLE_ROLES_PATH": str(self.playbook_dir / "roles"),
            "ANSIBLE_COLLECTIONS_PATH": str(self.collections),
            # never reuse another run's ssh master (a stale one hangs); short path: sockets max 108 chars
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(Path(tempfile.gettempdir()) / f"gf-cp-{pdd.name}"),
            "ANSIBLE_TASK_TIMEOUT": str(self.task_timeout_s),
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_NOCOLOR": "True",
            "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
            "ANSIBLE_PIPELINING": "True",
        }
        if isinstance(connection, SshConnection):
            env["ANSIBLE_TIMEOUT"] = str(connection.connect_timeout_s)
            env["ANSIBLE_SSH_ARGS"] = connection.ssh_args(pdd / "known_hosts")
        return env

    def run(self, nodes: Iterable[Node], connection: Connection, extravars: Mapping[str, Any], *,
            playbook: str = "site.yml", check: bool = False,
            run_id: str | None = None, on_progress: Callable[[HostProgress], None] | None = None) -> RunResult:
        nodes = list(nodes)
        run_id = run_id or uuid.uuid4().hex[:12]
        pdd = self.state_dir / "runner" / run_id
        pdd.mkdir(parents=True, exist_ok=True)
        collector = _Collector(on_progress)
        cmdline = "--check --diff" if check else None
        runner = self.backend(
            private_data_dir=str(pdd), project_dir=str(self.playbook_dir), playbook=playbook,
            inventory=build_inventory(nodes, connection), extravars=dict(extravars),
            envvars=self.envvars(pdd, connection), cmdline=cmdline, forks=self.forks,
            ident="run", event_handler=collector, quiet=True, suppress_env_files=True,
            timeout=self.run_timeout_s,
        )
        status, rc = str(runner.status), int(runner.rc if runner.rc is not None else -1)
        if status != "successful" and not collector.seen:
            raise ExternalCommandFailed("ansible-playbook", f"status {status}, rc {rc}, no host ran; "
                                        f"see {pdd / 'artifacts' / 'run' / 'stdout'}")
        hosts = {n.slot: self._verdict(n.slot, collector) for n in nodes}
        return RunResult(run_id=run_id, status=status, rc=rc, hosts=hosts, private_data_dir=pdd)

    @staticmethod
    def _verdict(host: str, c: _Collector) -> HostResult:
        changed = tuple(c.changed.get(host, ()))
        if host in c.unreachable:
            task, msg = c.unreachable[host]
            return HostResult(host, Verdict.UNREACHABLE, task, msg, changed)
        if host in c.failed:
            task, msg = c.failed[host]
            return HostResult(host, Verdict.FAILED, task, msg, changed)
        if host in c.seen:
            return HostResult(host, Verdict.OK, changed=changed)
        return HostResult(host, Verdict.UNREACHABLE, None, "no task ran on this host")
