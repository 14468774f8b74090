"""How Slurm's commands reach slurmctld: on this machine, over SSH, or through SSM Run Command.

Why: on a real AWS stack the controller sits in a private management subnet while gpufleet runs
on a CI runner or a laptop; only the controller (or a login node) has a configured Slurm client.
A transport runs one argv there, bounded by `timeout -k 2 N` on the far side, and reports what
happened as a `Completed`: the command's exit code and output, or that it timed out, that the
controller could not be reached at all, or that the output came back incomplete. Turning those
into errors that name the node is `SlurmCli`'s job (`cli.py`), so every transport reads alike.

The argv travels as ONE shell word list (`shlex.join`), so a reason text with quotes and blanks
arrives as the single argument it was here.
"""

from __future__ import annotations

import base64
import getpass
import math
import os
import shlex
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence
from urllib.parse import unquote, urlparse

KILL_AFTER_S = 2  # `timeout -k`: a command that ignores TERM is killed this long after it
NOT_FOUND = 127  # a shell's (and `timeout`'s) exit code for a command it cannot find
SSH_FAILED = 255  # ssh's own exit code: no connection, no login (a remote command never uses it here)
SSH_SESSIONS = 8  # at once per controller: under sshd's defaults MaxSessions 10 (per master) and MaxStartups 10
SSM_OUTPUT_LIMIT = 24_000  # GetCommandInvocation returns the first 24,000 characters of each stream


class Status(Enum):
    DONE = "done"  # the command ran; see exit_code
    TIMED_OUT = "timed out"  # it ran past its limit, or the controller never answered in time
    UNREACHABLE = "unreachable"  # the command never started: no connection, no login, no SSM agent
    INCOMPLETE = "incomplete"  # it ran, but its output came back cut short


@dataclass(frozen=True)
class Completed:
    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    detail: str = ""  # why it is not DONE, in the transport's words


class Transport(Protocol):
    @property
    def where(self) -> str:
        """For messages: "this machine", "ssh ubuntu@10.0.4.10", "SSM i-0abc..."."""

    @property
    def user(self) -> str:
        """Who the commands run as there (a reservation for srun must name that user)."""

    @property
    def max_stdin_chars(self) -> int | None:
        """A transport that must embed stdin in the command limits its size (None: no limit)."""

    def execute(self, argv: Sequence[str], *, env: Mapping[str, str], stdin: str | None, timeout_s: float,
                merge_stderr: bool = False) -> Completed:
        """Run `argv` with `env` set on top of the target's environment, bounded by `timeout_s`."""
        ...


def remote_command(argv: Sequence[str], env: Mapping[str, str], timeout_s: float, merge_stderr: bool = False) -> str:
    """One shell command line: `env K=V timeout -k 2 N argv...`, every word quoted."""
    words = ["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else []
    line = shlex.join([*words, "timeout", "-k", str(KILL_AFTER_S), f"{timeout_s:g}", *argv])
    return f"exec 2>&1; {line}" if merge_stderr else line


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _run(argv: Sequence[str], *, env: Mapping[str, str] | None, stdin: str | None, timeout_s: float,
         merge_stderr: bool) -> tuple[int | None, str, str]:
    """(exit code or None on a local timeout, stdout, stderr) of a local process."""
    try:
        proc = subprocess.run(list(argv), input=stdin, text=True, env=dict(env) if env is not None else None,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                              stdin=None if stdin is not None else subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        return None, _text(exc.stdout), _text(exc.stderr)
    return proc.returncode, proc.stdout, proc.stderr or ""


@dataclass(frozen=True)
class LocalTransport:
    """Slurm's client on this machine (the controller, a login node, the local-slurm stack)."""

    where: str = "this machine"
    max_stdin_chars: int | None = None

    @property
    def user(self) -> str:
        return getpass.getuser()

    def execute(self, argv: Sequence[str], *, env: Mapping[str, str], stdin: str | None, timeout_s: float,
                merge_stderr: bool = False) -> Completed:
        if shutil.which(argv[0]) is None:
            return Completed(Status.DONE, NOT_FOUND, stderr=f"{argv[0]}: command not found")
        code, out, err = _run(["timeout", "-k", str(KILL_AFTER_S), f"{timeout_s:g}", *argv],
                              env={**os.environ, **env}, stdin=stdin, timeout_s=timeout_s + KILL_AFTER_S + 3,
                              merge_stderr=merge_stderr)
        return _finished(code, out, err)


def _finished(code: int | None, out: str, err: str) -> Completed:
    """`timeout`'s 124 (TERM) and 137 (KILL), or no exit at all, mean the limit was hit."""
    if code is None or code in (124, 137):
        return Completed(Status.TIMED_OUT, code, out, err)
    return Completed(Status.DONE, code, out, err)


@dataclass(frozen=True)
class SshTransport:
    """The OpenSSH client to the controller, never prompting (BatchMode), stdin passed through.

    Why a ProxyCommand rather than `-J`: options given on ssh's command line do not reach the
    jump host's connection, which would then prompt for an unknown host key or a password and
    hang until the timeout; the ProxyCommand's own ssh gets the same options, key and known_hosts.
    Why `control_path`: one master connection carries every command of the next minute (an
    admission wave is hundreds of scontrol calls; a handshake through a bastion each costs more
    than the command), and the keep-alives stop a master whose controller vanished from hanging.
    """

    host: str
    user: str
    port: int = 22
    key_file: Path | None = None
    proxy_jump: str | None = None  # user@bastion[:port]
    known_hosts: Path | None = None  # None: the user's own; a fresh controller is accepted once (accept-new)
    connect_timeout_s: int = 10
    control_path: str | None = None  # ssh's ControlPath (with %C) to share one connection; None: one each
    max_stdin_chars: int | None = None
    # the launcher runs up to 16 specs in parallel; more sessions than sshd allows would be refused
    sessions: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(SSH_SESSIONS),
                                                 compare=False, repr=False)

    @property
    def where(self) -> str:
        via = f" via {self.proxy_jump}" if self.proxy_jump else ""
        port = f":{self.port}" if self.port != 22 else ""
        return f"ssh {self.user}@{self.host}{port}{via}"

    def options(self, connect_timeout_s: int) -> list[str]:
        opts = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout_s}",
                "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=2",
                "-o", "StrictHostKeyChecking=accept-new", "-o", "LogLevel=ERROR"]
        if self.known_hosts is not None:
            opts += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.key_file is not None:
            opts += ["-o", "IdentitiesOnly=yes", "-i", str(self.key_file)]
        return opts

    def _mux(self) -> list[str]:
        if self.control_path is None:
            return []
        return ["-o", "ControlMaster=auto", "-o", "ControlPersist=60s", "-o", f"ControlPath={self.control_path}"]

    def argv(self, command: str, timeout_s: float) -> list[str]:
        connect = max(1, min(self.connect_timeout_s, math.ceil(timeout_s)))
        opts = self.options(connect)
        if self.proxy_jump:
            jump, _, jump_port = self.proxy_jump.partition(":")
            proxy = ["ssh", *opts, "-p", jump_port or "22", "-W", "%h:%p", jump]
            opts += ["-o", f"ProxyCommand={shlex.join(proxy)}"]
        return ["ssh", *opts, *self._mux(), "-p", str(self.port), f"{self.user}@{self.host}", "--", command]

    def close(self) -> None:
        """Stop the shared master connection now instead of at its ControlPersist timeout."""
        if self.control_path is not None:
            _run(["ssh", *self._mux(), "-O", "exit", "-p", str(self.port), f"{self.user}@{self.host}"],
                 env=None, stdin=None, timeout_s=10, merge_stderr=False)

    def execute(self, argv: Sequence[str], *, env: Mapping[str, str], stdin: str | None, timeout_s: float,
                merge_stderr: bool = False) -> Completed:
        ssh = self.argv(remote_command(argv, env, timeout_s, merge_stderr), timeout_s)
        # the remote `timeout` bounds the command; this bounds connecting (twice: the jump host too)
        limit = timeout_s + KILL_AFTER_S + 2 * self.connect_timeout_s + 3
        with self.sessions:
            code, out, err = _run(ssh, env=None, stdin=stdin, timeout_s=limit, merge_stderr=merge_stderr)
        if code == SSH_FAILED:
            lines = [ln.strip() for ln in (out if merge_stderr else err).splitlines() if ln.strip()]
            return Completed(Status.UNREACHABLE, code, out, err, detail=lines[-1] if lines else "ssh exited 255")
        return _finished(code, out, err)


class FirstUseTransport:
    """A transport built at its first use, once, even from the launcher's threads: a real stack's
    controller is known only from its Pulumi outputs, which exist after the first batch's update."""

    def __init__(self, build: Callable[[], Transport], describe: str) -> None:
        self._build = build
        self._describe = describe
        self._built: Transport | None = None
        self._lock = threading.Lock()

    def get(self) -> Transport:
        with self._lock:
            if self._built is None:
                self._built = self._build()
            return self._built

    @property
    def where(self) -> str:
        return self._built.where if self._built is not None else self._describe

    @property
    def user(self) -> str:
        return self.get().user

    @property
    def max_stdin_chars(self) -> int | None:
        return self.get().max_stdin_chars

    def execute(self, argv: Sequence[str], *, env: Mapping[str, str], stdin: str | None, timeout_s: float,
                merge_stderr: bool = False) -> Completed:
        return self.get().execute(argv, env=env, stdin=stdin, timeout_s=timeout_s, merge_stderr=merge_stderr)


# --- SSM Run Command ------------------------------------------------------------------------------

PENDING_STATES = frozenset({"Pending", "InProgress", "Delayed", "Cancelling"})
NOT_DELIVERED = frozenset({"Undeliverable", "DeliveryTimedOut", "Terminated"})  # StatusDetails: never ran
THROTTLED = frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException", "RequestLimitExceeded"})
NOT_MANAGED = frozenset({"InvalidInstanceId"})  # not running, no agent, or not registered with SSM


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


@dataclass
class SsmTransport:
    """`AWS-RunShellScript` on the controller instance, polled with `GetCommandInvocation`.

    stdin cannot be streamed to a Run Command, so it travels base64-encoded inside the script
    (hence `max_stdin_chars`: `SlurmCli` splits bigger scontrol input at line ends). SSM returns
    only the first 24,000 characters of each stream; with an output bucket the full text is read
    from S3, without one a longer output is reported INCOMPLETE rather than parsed half.
    `delivery_s`: how long the agent may take to pick the command up, on top of its own limit.
    """

    instance_id: str
    ssm: Any  # a boto3 SSM client
    s3: Any | None = None  # a boto3 S3 client, to read output longer than SSM returns
    bucket: str | None = None
    key_prefix: str = "gpufleet/slurm"
    delivery_s: float = 30.0
    first_poll_s: float = 0.5
    max_poll_s: float = 5.0
    max_stdin_chars: int | None = 16_000  # 21 KB once base64-encoded
    user: str = "root"  # AWS-RunShellScript runs as root
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    calls: list[str] = field(default_factory=list, compare=False)  # the API operations made, in order

    @property
    def where(self) -> str:
        return f"SSM {self.instance_id}"

    def script(self, argv: Sequence[str], env: Mapping[str, str], stdin: str | None, timeout_s: float,
               merge_stderr: bool) -> str:
        command = remote_command(argv, env, timeout_s, merge_stderr)
        if stdin is None:
            return f"{command} </dev/null"
        data = base64.b64encode(stdin.encode()).decode()
        return f"printf %s {data} | base64 -d | {{ {command}; }}"

    def execute(self, argv: Sequence[str], *, env: Mapping[str, str], stdin: str | None, timeout_s: float,
                merge_stderr: bool = False) -> Completed:
        deadline = self.clock() + timeout_s + KILL_AFTER_S + self.delivery_s
        request: dict[str, Any] = {
            "InstanceIds": [self.instance_id], "DocumentName": "AWS-RunShellScript",
            "Comment": f"gpufleet: {' '.join(argv[:3])}"[:100],
            "TimeoutSeconds": max(30, math.ceil(self.delivery_s)),  # delivery; the API's minimum is 30
            "Parameters": {"commands": [self.script(argv, env, stdin, timeout_s, merge_stderr)],
                           "executionTimeout": [str(math.ceil(timeout_s) + KILL_AFTER_S + 5)]},
        }
        if self.bucket:
            request.update(OutputS3BucketName=self.bucket, OutputS3KeyPrefix=self.key_prefix)
        sent = self._call("send_command", request, deadline)
        if isinstance(sent, Completed):
            return sent
        command_id = sent["Command"]["CommandId"]
        delay = self.first_poll_s
        while True:
            self.sleep(min(delay, max(0.0, deadline - self.clock())))
            got = self._call("get_command_invocation", {"CommandId": command_id, "InstanceId": self.instance_id},
                             deadline, missing_ok=True)
            if isinstance(got, Completed):  # SSM itself failed us (throttled to the deadline, access lost)
                if got.status is Status.TIMED_OUT:
                    self._cancel(command_id)
                return got
            if got is not None and got["Status"] not in PENDING_STATES:
                return self._outcome(got)
            if self.clock() >= deadline:
                self._cancel(command_id)
                return Completed(Status.TIMED_OUT, detail=f"command {command_id} still "
                                 f"{got['Status'] if got else 'not registered'} after {timeout_s:g} s")
            delay = min(delay * 2, self.max_poll_s)

    def _call(self, operation: str, params: Mapping[str, Any], deadline: float,
              missing_ok: bool = False) -> Any:
        """The API call, retried with backoff while throttled (until `deadline`); a Completed when it
        cannot go on; None for an invocation SSM does not know yet (right after send_command)."""
        from botocore.exceptions import BotoCoreError, ClientError

        delay = self.first_poll_s
        while True:
            self.calls.append(operation)
            try:
                return getattr(self.ssm, operation)(**params)
            except (ClientError, BotoCoreError) as exc:
                code = _code(exc)
                if missing_ok and code == "InvocationDoesNotExist":
                    return None
                if code in NOT_MANAGED:
                    return Completed(Status.UNREACHABLE, detail=f"{code}: {exc} (is the instance running, with "
                                     "the SSM agent online and an instance profile allowing SSM?)")
                if code not in THROTTLED:  # no credentials, no endpoint, access denied: SSM cannot run it
                    return Completed(Status.UNREACHABLE, detail=f"{operation} failed: {exc}")
                if self.clock() + delay >= deadline:
                    return Completed(Status.TIMED_OUT, detail=f"{operation} still throttled ({code})")
                self.sleep(delay)
                delay = min(delay * 2, self.max_poll_s)

    def _outcome(self, inv: Mapping[str, Any]) -> Completed:
        status, details = inv["Status"], inv.get("StatusDetails", "")
        stdout, stderr = inv.get("StandardOutputContent", ""), inv.get("StandardErrorContent", "")
        if details in NOT_DELIVERED or status == "Cancelled":  # the agent never took it (offline, stopped)
            return Completed(Status.UNREACHABLE, None, stdout, stderr,
                             detail=f"the command was not run ({status}: {details})")
        if status == "TimedOut":
            return Completed(Status.TIMED_OUT, inv.get("ResponseCode"), stdout, stderr, detail=details)
        cut = [name for name, text in (("stdout", stdout), ("stderr", stderr)) if len(text) >= SSM_OUTPUT_LIMIT]
        if "stdout" in cut:
            full = self._from_s3(inv.get("StandardOutputUrl", ""))
            if full is None:
                return Completed(Status.INCOMPLETE, inv.get("ResponseCode"), stdout, stderr,
                                 detail=f"SSM returned only the first {SSM_OUTPUT_LIMIT:,} characters of its output "
                                        "and no S3 output bucket holds the rest (set gpufleet:configure.ssmBucket "
                                        "or give the stack a `bucket` output)")
            stdout = full
        return Completed(Status.DONE, int(inv.get("ResponseCode", -1)), stdout, stderr)

    def _from_s3(self, url: str) -> str | None:
        """The full stream from the output bucket (StandardOutputUrl: path- or virtual-hosted style)."""
        if not (url and self.bucket and self.s3 is not None):
            return None
        parsed = urlparse(url)
        path = unquote(parsed.path).lstrip("/")
        key = path[len(self.bucket) + 1:] if path.startswith(self.bucket + "/") else path
        self.calls.append("get_object")
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read().decode(errors="replace")

    def _cancel(self, command_id: str) -> None:
        """Best effort: a command past its deadline must not run on after gpufleet gave up on it."""
        self.calls.append("cancel_command")
        try:
            self.ssm.cancel_command(CommandId=command_id, InstanceIds=[self.instance_id])
        except Exception:  # noqa: BLE001 - the timeout is what gets reported; a failed cancel adds nothing
            pass
