"""`gpufleet ops serve`: Alertmanager's webhook receiver and the pool's state for Prometheus.

Transport only: who may call, how much, how long; the decisions are `webhook`/`actions`'.
POST / (or /alerts) takes a version-4 notification with `Authorization: Bearer <token>` (the
token Alertmanager's `http_config.authorization` sends): 401 without it, 413 for a body over
`MAX_BODY`, 400 for a malformed one, 429 past the caller's rate. An accepted notification is
queued; one worker applies the queue in order, taking the stack's lock once for all it finds
waiting and pausing between takes, so an operator's `gpufleet pool blacklist` gets the lock during a flood.
The answer waits up to `answer_wait_s` for the worker: 200 with what was done, else 202 (queued;
Alertmanager counts any 2xx as delivered). Pages go to their own thread, never the request's.
Answers never carry an exception's text (a lock's holder names a pid and a host): the log does.
GET /metrics serves `gpufleet_node_admitted` and `gpufleet_node_busy` per slot.

Why the standard library's `ThreadingHTTPServer`: the load is one Alertmanager (a notification
per node group, a few a second in an outage) and one Prometheus scrape; per-connection threads
with a socket timeout, a cap on open connections and a real listen backlog cover a stalled or
flooding client, and the head node's venv gains no server dependency to pin and patch.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Sequence

from pydantic import ValidationError

from gpufleet.errors import GpufleetError, LockHeld
from gpufleet.masking import escape_controls, mask
from gpufleet.monitoring import metrics as m
from gpufleet.ops.webhook import Notification, Page
from gpufleet.pool.protocol import NodeState, PoolState

log = logging.getLogger("gpufleet.ops")
MAX_BODY = 2 * 2**20  # a 1,000-alert notification is about 1 MiB
MIN_TOKEN = 16


def exposition(state: PoolState) -> str:
    """Prometheus text format of the pool: admitted and busy per slot, with partition and state."""
    lines = [f"# HELP {m.NODE_ADMITTED} 1 when the pool admitted the node (gates passed)",
             f"# TYPE {m.NODE_ADMITTED} gauge"]
    rows = sorted(state.nodes.values(), key=lambda n: n.slot)
    lines += [f'{m.NODE_ADMITTED}{{node="{n.slot}",partition="{n.partition or ""}",state="{n.state.value}"}} '
              f"{int(n.state is NodeState.ADMITTED)}" for n in rows]
    lines += [f"# HELP {m.NODE_BUSY} 1 when the node runs work", f"# TYPE {m.NODE_BUSY} gauge"]
    lines += [f'{m.NODE_BUSY}{{node="{n.slot}"}} {int(n.busy)}' for n in rows]
    return "\n".join(lines) + "\n"


class SafeFormatter(logging.Formatter):
    """Every log line masked and its control characters escaped: an alert name with a newline forges
    no line, an annotation quoting a secret shows none."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(mask(super().format(record)))


def bearer_ok(header: str | None, token: str | None) -> bool:
    """`Authorization: Bearer <token>`, compared in constant time; no token configured: open."""
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class RateLimit:
    """A token bucket per caller: `rate` requests a second, bursts of `burst` (Alertmanager sends a
    notification per node group; a caller past this is a loop or an attack, answered 429)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, caller: str) -> bool:
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.get(caller, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            ok = tokens >= 1
            self._buckets[caller] = (tokens - 1 if ok else tokens, now)
            if len(self._buckets) > 10_000:  # forget idle callers
                self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < 60}
            return ok


@dataclass
class _Item:
    note: Notification
    caller: str
    done: "Future[dict[str, Any]]" = field(default_factory=Future)


class Intake:
    """The one worker that applies queued notifications in arrival order, all those waiting (up to
    `batch`) under one lock take.

    A held lock (a rollout, an operator's command) or an unreachable pool is retried with backoff
    while the notification waits; between two lock takes the worker pauses `yield_s`, so a command
    waiting for the lock gets it."""

    def __init__(self, apply: Callable[[Notification], dict[str, Any]], *, capacity: int = 1000,
                 yield_s: float = 0.1, backoff_s: Sequence[float] = (0.2, 0.5, 1, 2, 5), attempts: int = 30,
                 batch: int = 200, on_failed: Callable[[_Item, Exception], None] = lambda _i, _e: None) -> None:
        self.apply, self.yield_s, self.backoff_s, self.attempts = apply, yield_s, tuple(backoff_s), attempts
        self.batch = batch
        self.on_failed = on_failed
        self._queue: queue.Queue[_Item | None] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._run, name="gpufleet-ops-intake", daemon=True)
        self._thread.start()

    def submit(self, note: Notification, caller: str) -> "Future[dict[str, Any]] | None":
        """Queue one notification; None when the queue is full (answered 503: Alertmanager retries)."""
        item = _Item(note, caller)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return None
        return item.done

    def depth(self) -> int:
        return self._queue.qsize()

    def stop(self, timeout: float = 10) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            batch = [item]
            while len(batch) < self.batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                batch.append(more)
            self._apply(batch)
            time.sleep(self.yield_s)

    def _apply(self, batch: list[_Item]) -> None:
        """One lock take for everything queued: the alerts of the batch as one notification (the
        budget holds across them as across one), each caller answered with its own alerts' part."""
        item = batch[0] if len(batch) == 1 else _Item(merged([i.note for i in batch]), batch[0].caller)
        for attempt in range(self.attempts):
            try:
                result = self.apply(item.note)
                for i in batch:
                    i.done.set_result(result if len(batch) == 1 else part_of(result, i.note))
                return
            except GpufleetError as exc:
                wait = self.backoff_s[min(attempt, len(self.backoff_s) - 1)]
                log.warning("notification %s not applied yet (%s: %s); retrying in %.1f s", item.note.groupKey,
                            type(exc).__name__, exc, wait)
                if attempt + 1 == self.attempts and not isinstance(exc, LockHeld):
                    break
                time.sleep(wait)
            except Exception as exc:  # noqa: BLE001 - the worker must outlive one bad notification
                log.exception("notification %s failed", item.note.groupKey)
                self._fail(batch, exc)
                return
        err = GpufleetError(f"notification {item.note.groupKey} not applied after {self.attempts} attempts")
        log.error("%s", err)
        self._fail(batch, err)

    def _fail(self, batch: list[_Item], exc: Exception) -> None:
        for i in batch:
            self.on_failed(i, exc)
            i.done.set_exception(exc)


def merged(notes: Sequence[Notification]) -> Notification:
    """Several queued notifications as one: their alerts in arrival order."""
    first = notes[0]
    return first.model_copy(update={"groupKey": f"{len(notes)} queued notifications, first {first.groupKey}",
                                    "alerts": [a for n in notes for a in n.alerts],
                                    "status": "firing" if any(n.status == "firing" for n in notes) else "resolved"})


def part_of(summary: dict[str, Any], note: Notification) -> dict[str, Any]:
    """The part of a merged decision's summary about one notification's alerts (by node and name)."""
    mine = {(a.labels.get("node"), a.labels.get("alertname", "unnamed")) for a in note.alerts}
    slots = {slot for slot, _ in mine}
    out: dict[str, Any] = {}
    for key, rows in summary.items():
        if not isinstance(rows, list):
            out[key] = rows
        elif rows and isinstance(rows[0], dict) and "alertname" in rows[0]:
            out[key] = [r for r in rows if (r.get("slot"), r.get("alertname")) in mine]
        else:
            out[key] = [r for r in rows if r in slots]
    return out


class Pager:
    """Pages on their own thread: `ops.pageCommand` may take its 30 s without holding a request or
    the stack's lock."""

    def __init__(self, send: Callable[[Sequence[Page]], None]) -> None:
        self.send = send
        self._queue: queue.Queue[Sequence[Page] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="gpufleet-ops-pager", daemon=True)
        self._thread.start()

    def __call__(self, pages: Sequence[Page], *_: Any) -> None:
        if pages:
            self._queue.put(list(pages))

    def stop(self, timeout: float = 35) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (pages := self._queue.get()) is not None:
            try:
                self.send(pages)
            except Exception:  # noqa: BLE001 - a failed page is logged; the next one still goes
                log.exception("PAGE delivery failed")


@dataclass
class Settings:
    token: str | None  # None only with --no-auth
    rate: float = 20.0
    burst: int = 100
    read_timeout_s: float = 10.0
    answer_wait_s: float = 5.0
    max_connections: int = 64


AuditCall = Callable[[str, str, dict[str, Any]], None]  # (what, why, details)


def make_handler(intake: Intake, pool_state: Callable[[], PoolState], settings: Settings,
                 audit: AuditCall, limits: RateLimit) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpufleet-ops"
        sys_version = ""
        timeout = settings.read_timeout_s  # each read and write on the connection

        def _caller(self) -> str:
            return str(self.client_address[0])

        def _answer(self, code: int, body: dict[str, Any] | str, ctype: str = "application/json",
                    headers: dict[str, str] | None = None) -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, code: int, why: str, answer: str, **details: Any) -> None:
            log.error("refused %s %s from %s: %d %s", self.command, self.path[:200], self._caller(), code, why)
            audit("webhook refused", why, {"caller": self._caller(), "status": code, "method": self.command,
                                           "path": self.path[:200], **details})
            headers = {"WWW-Authenticate": "Bearer"} if code == 401 else {"Retry-After": "1"} if code == 429 else {}
            self._answer(code, {"error": answer}, headers=headers)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                return self._refuse(404, "no such path", "not found")
            try:
                text = exposition(pool_state())
            except GpufleetError as exc:
                log.error("metrics: %s", exc)
                return self._answer(503, {"error": "the pool's state could not be read; see the service log"})
            self._answer(200, text, "text/plain; version=0.0.4")

        def do_POST(self) -> None:  # noqa: N802
            caller = self._caller()
            if self.path.split("?")[0] not in ("/", "/alerts"):
                return self._refuse(404, "no such path", "not found")
            if not limits.allow(caller):
                self.close_connection = True
                return self._refuse(429, "over the caller's rate limit", "too many requests")
            if not bearer_ok(self.headers.get("Authorization"), settings.token):
                self.close_connection = True
                return self._refuse(401, "no valid bearer token", "a valid bearer token is required")
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length > MAX_BODY:
                self.close_connection = True
                return self._refuse(413, f"a body of {length} bytes", f"the body is over {MAX_BODY} bytes",
                                    bytes=length)
            if length <= 0:
                self.close_connection = True
                return self._refuse(400, "no Content-Length", f"a body of 1 to {MAX_BODY} bytes is required")
            raw = self._body(length)
            if raw is None:
                return
            try:
                note = Notification.model_validate_json(raw)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
                log.error("rejected a malformed notification from %s: %s", caller, problems)
                return self._refuse(400, "a malformed notification", "not an Alertmanager version-4 notification",
                                    problems=problems[:500])
            done = intake.submit(note, caller)
            if done is None:
                return self._refuse(503, "the queue is full", "busy; retry later", group=note.groupKey)
            audit("webhook accepted", f"notification {note.groupKey}",
                  {"caller": caller, "alerts": len(note.alerts), "status": note.status, "queued": intake.depth()})
            try:
                self._answer(200, done.result(timeout=settings.answer_wait_s))
            except TimeoutError:
                self._answer(202, {"queued": True, "ahead": intake.depth()})
            except Exception:  # noqa: BLE001 - the worker logged it; the caller learns nothing internal
                self._answer(503, {"error": "the notification could not be applied; see the service log"})

        def _body(self, length: int) -> bytes | None:
            """The body, read within one overall deadline (a trickling client cannot hold the thread)."""
            deadline = time.monotonic() + settings.read_timeout_s
            chunks, got = [], 0
            try:
                while got < length:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    self.connection.settimeout(left)
                    chunk = self.rfile.read1(min(65536, length - got))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    got += len(chunk)
            except (TimeoutError, socket.timeout):
                self.close_connection = True
                self._refuse(408, "the body did not arrive in time", "request timeout", bytes=got)
                return None
            if got < length:
                self.close_connection = True
                self._refuse(400, "a short body", "the body is shorter than its Content-Length", bytes=got)
                return None
            return b"".join(chunks)

        def handle(self) -> None:
            if isinstance(self.connection, ssl.SSLSocket):
                try:
                    self.connection.do_handshake()
                except (ssl.SSLError, OSError) as exc:  # no client certificate, one the CA did not sign, a stall
                    why = getattr(exc, "reason", None) or type(exc).__name__
                    log.error("refused a TLS connection from %s: %s", self._caller(), why)
                    audit("webhook refused", "TLS handshake failed", {"caller": self._caller(), "status": None,
                                                                      "tls": str(why)})
                    self.close_connection = True
                    return
            super().handle()

        def log_message(self, fmt: str, *args: Any) -> None:
            log.info("%s %s", self._caller(), fmt % args)

    return Handler


class OpsHTTPServer(ThreadingHTTPServer):
    """Threads per connection, at most `max_connections` at once (beyond it: closed at once), a
    listen backlog of 128 (the default 5 reset a burst of 20 clients). With `tls`, each accepted
    socket is wrapped and its handshake done in the connection's own thread, under the read
    timeout, so a client that stalls in the handshake holds no other caller."""

    request_queue_size = 128
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int,
                 on_close: Callable[[], None] = lambda: None, tls: ssl.SSLContext | None = None) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        self._on_close = on_close
        self.tls = tls
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or reset mid-answer is a log line, not a traceback on stderr."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)):
            log.info("connection from %s ended early: %s", client_address[0], type(exc).__name__)
            return
        log.exception("a request from %s failed", client_address[0])

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.error("refused a connection from %s: %s connections open", client_address[0], "all")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def server_close(self) -> None:
        super().server_close()
        self._on_close()


def serve(host: str, port: int, *, apply: Callable[[Notification], dict[str, Any]],
          pool_state: Callable[[], PoolState], settings: Settings, audit: AuditCall,
          on_failed: Callable[[_Item, Exception], None] = lambda _i, _e: None,
          tls: ssl.SSLContext | None = None) -> OpsHTTPServer:
    """A bound server (port 0: any free port; `server.server_address` says which); call
    serve_forever, then server_close (which stops the worker). `tls`: `tls_context`'s."""
    intake = Intake(apply, on_failed=on_failed)
    limits = RateLimit(settings.rate, settings.burst)
    return OpsHTTPServer((host, port), make_handler(intake, pool_state, settings, audit, limits),
                         settings.max_connections, on_close=intake.stop, tls=tls)


def tls_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    """HTTPS with the server's certificate; with `client_ca`, mutual TLS: a client must present a
    certificate that CA signed (Alertmanager's `http_config.tls_config` cert_file/key_file), else
    the handshake fails before any request is read. The bearer token is still required."""
    from gpufleet.errors import ConfigError

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{cert} / {key}: not a certificate and its key ({exc})", field="--tls-cert/--tls-key",
                          expected="PEM files: the server's certificate (chain) and its private key") from None
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{client_ca}: not a CA certificate ({exc})", field="--client-ca",
                              expected="a PEM file of the CA that signs Alertmanager's client certificate") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def read_token(text: str, where: str) -> str:
    """The token in a token file: one line, at least MIN_TOKEN characters (what `ops token` writes)."""
    from gpufleet.errors import ConfigError

    token = text.strip()
    if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
        raise ConfigError(f"{where}: not a webhook token", field="--token-file",
                          expected=f"one line of {MIN_TOKEN}+ characters without spaces (gpufleet ops token)")
    return token
