"""`gpufleet ops serve`: Alertmanager's webhook receiver and the pool's state for Prometheus.

Thin: parse, call `actions.handle` / render the pool metrics, answer. POST / (or /alerts) takes a
version-4 notification: 200 with what was done, 400 for a malformed payload (logged, nothing
done), 503 when the stack is locked or the pool unreachable (Alertmanager retries 5xx).
GET /metrics serves `gpufleet_node_admitted` and `gpufleet_node_busy` per slot, which the
utilisation and memory rules join on. One request at a time: decisions read the pool they change.
"""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable

from pydantic import ValidationError

from gpufleet.errors import GpufleetError
from gpufleet.monitoring import metrics as m
from gpufleet.ops.webhook import Notification
from gpufleet.pool.protocol import NodeState, PoolState

log = logging.getLogger("gpufleet.ops")
MAX_BODY = 4 * 2**20


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


def make_handler(on_alerts: Callable[[Notification], dict[str, Any]],
                 pool_state: Callable[[], PoolState]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpufleet-ops"

        def _answer(self, code: int, body: str, ctype: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                return self._answer(404, json.dumps({"error": "not found"}))
            try:
                text = exposition(pool_state())
            except GpufleetError as exc:
                log.error("metrics: %s", exc)
                return self._answer(503, json.dumps({"error": str(exc)}))
            self._answer(200, text, "text/plain; version=0.0.4")

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?")[0] not in ("/", "/alerts"):
                return self._answer(404, json.dumps({"error": "not found"}))
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length <= 0 or length > MAX_BODY:
                log.error("rejected a notification of %d bytes from %s", length, self.client_address[0])
                return self._answer(400, json.dumps({"error": f"a body of 1 to {MAX_BODY} bytes is required"}))
            raw = self.rfile.read(length)
            try:
                note = Notification.model_validate_json(raw)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
                log.error("rejected a malformed notification from %s: %s", self.client_address[0], problems)
                return self._answer(400, json.dumps({"error": "not an Alertmanager version-4 notification",
                                                     "problems": problems}))
            try:
                result = on_alerts(note)
            except GpufleetError as exc:
                log.error("notification %s not handled: %s", note.groupKey, exc)
                return self._answer(503, json.dumps({"error": str(exc)}))
            self._answer(200, json.dumps(result))

        def log_message(self, fmt: str, *args: Any) -> None:
            log.info("%s %s", self.client_address[0], fmt % args)

    return Handler


def serve(host: str, port: int, on_alerts: Callable[[Notification], dict[str, Any]],
          pool_state: Callable[[], PoolState]) -> HTTPServer:
    """A bound server (port 0: any free port; `server.server_address` says which); call serve_forever."""
    return HTTPServer((host, port), make_handler(on_alerts, pool_state))
