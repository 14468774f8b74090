"""`ops serve` with mutual TLS (`--tls-cert/--tls-key/--client-ca`), certificates made by the
openssl CLI: a client with a certificate the CA signed and the token is served; without a
certificate, or with one another CA signed, the handshake fails, the refusal is audited and
nothing is applied; a client that stalls in the handshake holds no other caller."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from gpufleet.errors import ConfigError
from gpufleet.ops import server
from gpufleet.ops.webhook import Notification
from gpufleet.pool.protocol import PoolState
from tests.ops.alertmanager import alert, notification

TOKEN = "t" * 43


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "2", "-subj", f"/CN={name}", cwd=d)


def _signed(d: Path, name: str, ca: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is not installed")
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "rogue-ca")
    _signed(d, "server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")
    _signed(d, "alertmanager", "ca", "extendedKeyUsage=clientAuth")
    _signed(d, "rogue", "rogue-ca", "extendedKeyUsage=clientAuth")
    return d


class Served:
    def __init__(self, pki: Path) -> None:
        self.applied: list[Notification] = []
        self.audited: list[tuple[str, str, dict[str, Any]]] = []
        tls = server.tls_context(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem"))
        self.httpd = server.serve("127.0.0.1", 0, apply=lambda n: self.applied.append(n) or {"quarantined": []},
                                  pool_state=PoolState, settings=server.Settings(token=TOKEN, read_timeout_s=2.0),
                                  audit=lambda what, why, d: self.audited.append((what, why, d)), tls=tls)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def post(self, pki: Path, client: str | None) -> int:
        ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        if client is not None:
            ctx.load_cert_chain(str(pki / f"{client}.pem"), str(pki / f"{client}.key"))
        body = json.dumps(notification(alert("n1"))).encode()
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}/", data=body,
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code


@pytest.fixture
def served(pki: Path) -> Iterator[Served]:
    s = Served(pki)
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_a_client_certificate_the_ca_signed_and_the_token_are_served(served: Served, pki: Path) -> None:
    assert served.post(pki, "alertmanager") == 200
    assert len(served.applied) == 1


@pytest.mark.parametrize("client", [None, "rogue"])
def test_without_a_certificate_of_the_ca_the_handshake_fails_audited_and_nothing_applied(
        served: Served, pki: Path, client: str | None) -> None:
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        served.post(pki, client)
    deadline = time.monotonic() + 5
    while not served.audited and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.applied == []
    assert [(what, why) for what, why, _ in served.audited] == [("webhook refused", "TLS handshake failed")]


def test_a_client_stalled_in_the_handshake_holds_no_other_caller(served: Served, pki: Path) -> None:
    stalled = socket.create_connection(("127.0.0.1", served.port), timeout=30)  # sends no ClientHello
    started = time.monotonic()
    assert served.post(pki, "alertmanager") == 200
    assert time.monotonic() - started < 2.0
    stalled.settimeout(10)
    assert stalled.recv(100) == b""  # closed after the read timeout
    stalled.close()


def test_bad_certificate_files_are_a_configuration_error_naming_the_flag(tmp_path: Path, pki: Path) -> None:
    (tmp_path / "x.pem").write_text("not a certificate")
    with pytest.raises(ConfigError) as err:
        server.tls_context(str(tmp_path / "x.pem"), str(pki / "server.key"), None)
    assert err.value.field == "--tls-cert/--tls-key"
    with pytest.raises(ConfigError) as err:
        server.tls_context(str(pki / "server.pem"), str(pki / "server.key"), str(tmp_path / "x.pem"))
    assert err.value.field == "--client-ca"


def test_serve_refuses_half_a_tls_configuration(pki: Path) -> None:
    from click.testing import CliRunner

    from gpufleet.cli import main

    for args in (["--tls-cert", str(pki / "server.pem")], ["--client-ca", str(pki / "ca.pem")]):
        result = CliRunner().invoke(main, ["ops", "serve", "-s", "local", "--listen", "127.0.0.1:9797", *args])
        assert result.exit_code == 2 and "--tls-cert and --tls-key go together" in result.output, result.output


def _alertmanager_posts(served: Served, pki: Path, tmp_path: Path, tls: dict[str, str], until: Any) -> None:
    """A real Alertmanager (Debian's) with the token and `tls` in its webhook's http_config, fed one
    alert through its own API; returns once `until()` holds."""
    import yaml

    from gpufleet.monitoring import scrape
    from tests.ops.conftest import ensure_tool
    from tests.ops.serving import free_port

    binary = ensure_tool("prometheus-alertmanager")
    (tmp_path / "token").write_text(TOKEN + "\n")
    config = scrape.alertmanager_config(f"https://127.0.0.1:{served.port}/", group_wait_s=1,
                                        credentials_file=str(tmp_path / "token"), tls=tls)
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (tmp_path / "am.log").open("w") as log:
        proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'am'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        body = json.dumps([{"labels": {"alertname": "GpuXidFatal", "node": "n1", "severity": "critical",
                                       "gpufleet_action": "quarantine"},
                            "annotations": {"summary": "a GPU reported an Xid the gates quarantine on"}}]).encode()
        deadline = time.monotonic() + 60
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v2/alerts", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    assert r.status == 200
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "am.log").read_text()[-2000:]
                time.sleep(0.3)
        while not until():
            assert time.monotonic() < deadline, (tmp_path / "am.log").read_text()[-3000:]
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow  # Debian's Alertmanager, installed when missing
def test_a_real_alertmanager_with_its_client_certificate_and_the_token_is_served(served: Served, pki: Path,
                                                                              tmp_path: Path) -> None:
    tls = {"ca_file": str(pki / "ca.pem"), "cert_file": str(pki / "alertmanager.pem"),
           "key_file": str(pki / "alertmanager.key")}
    _alertmanager_posts(served, pki, tmp_path, tls, lambda: bool(served.applied))
    note = served.applied[0]
    assert note.alerts[0].labels["node"] == "n1" and note.receiver == "gpufleet"
    assert [what for what, _, _ in served.audited] == ["webhook accepted"]


@pytest.mark.slow
def test_a_real_alertmanager_without_a_client_certificate_is_refused_in_the_handshake(served: Served, pki: Path,
                                                                                    tmp_path: Path) -> None:
    _alertmanager_posts(served, pki, tmp_path, {"ca_file": str(pki / "ca.pem")}, lambda: bool(served.audited))
    assert served.applied == [] and served.audited[0][:2] == ("webhook refused", "TLS handshake failed")
