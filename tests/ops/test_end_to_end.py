"""Alert to quarantine for real, all on 127.0.0.1: a stub exporter serves DCGM-exporter metrics in
the exporter's exposition format, Debian's Prometheus scrapes it with the generated config and
rules, fires GpuXidFatal, Debian's Alertmanager calls `gpufleet ops serve`, and the node ends
quarantined in the simulated pool. Bounded: every wait has a deadline."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.bom import load_bom
from gpufleet.monitoring import counters as monitoring_counters, metrics, scrape
from tests.daytwo.fleet import pool_doc, state_dir
from tests.ops.conftest import ensure_tool
from tests.ops.serving import STACK, Served, fleet_base, free_port, served  # noqa: F401 - fixtures

DEADLINE_S = 120
pytestmark = pytest.mark.slow  # real Prometheus and Alertmanager, installed and started here
REPO = Path(__file__).resolve().parents[2]


def dcgm_exposition(hostname: str, xid: int) -> str:
    """Two GPUs as dcgm-exporter labels them (gpu, UUID, pci_bus_id, device, modelName, Hostname,
    DCGM_FI_DRIVER_VERSION); GPU 1 reports the Xid."""
    rows = []
    counters = monitoring_counters.deployed(load_bom(REPO / "images" / "bom.yaml").components.dcgm.version)
    for name, values in ((metrics.XID, (0, xid)), (metrics.GPU_UTIL, (85, 84)), (metrics.FB_USED, (60000, 61000)),
                         (metrics.FB_FREE, (21000, 20000))):
        exported = counters.get(name)  # the deployed counters file's type and help: a field it lacks is a KeyError
        rows += [f"# HELP {name} {exported.help}", f"# TYPE {name} {exported.kind}"]
        for gpu, value in enumerate(values):
            rows.append(f'{name}{{gpu="{gpu}",UUID="GPU-5b3c2f1e-0000-4000-8000-00000000000{gpu}",'
                        f'pci_bus_id="00000000:{0x53 + gpu:02X}:00.0",device="nvidia{gpu}",'
                        f'modelName="NVIDIA H100 80GB HBM3",Hostname="{hostname}",'
                        f'DCGM_FI_DRIVER_VERSION="570.172.08"}} {value}')
    return "\n".join(rows) + "\n"


@pytest.fixture
def stub_exporter() -> Iterator[tuple[int, dict[str, str]]]:
    body = {"text": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            data = body["text"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], body
    finally:
        httpd.shutdown()
        httpd.server_close()


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _chain(served: Served, stub_exporter: tuple[int, dict[str, str]], tmp_path: Path, slot: str,
           credentials_file: str | None, until: Callable[[], bool]) -> float:
    """Prometheus scraping the stub, Alertmanager posting to `served` (with the token read from
    `credentials_file`, or none); returns the seconds until `until()` held."""
    prometheus, alertmanager = ensure_tool("prometheus"), ensure_tool("prometheus-alertmanager")
    ensure_tool("promtool")
    stub_port, body = stub_exporter
    body["text"] = dcgm_exposition(slot, 79)
    out = tmp_path / "monitoring"
    result = CliRunner().invoke(main, ["--project", str(served.project), "ops", "rules", "-s", STACK, "--out", str(out)])
    assert result.exit_code == 0, result.output
    prom_port, am_port = free_port(), free_port()
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [f"127.0.0.1:{am_port}"]
    config["scrape_configs"][2]["static_configs"][0]["targets"] = [served.url.removeprefix("http://")]
    (out / "prometheus.yml").write_text(yaml.safe_dump(config))
    # the stub stands in for the slot's exporter; the other 39 nodes are not scraped here
    (out / scrape.TARGETS_DIR / f"{metrics.DCGM_JOB}.json").write_text(json.dumps(
        [{"targets": [f"127.0.0.1:{stub_port}"], "labels": {"node": slot}}]))
    (out / scrape.TARGETS_DIR / f"{metrics.NODE_JOB}.json").write_text("[]")
    am = scrape.alertmanager_config(served.url + "/", group_wait_s=1, credentials_file=credentials_file)
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(am))
    procs = [
        _start([alertmanager, f"--config.file={tmp_path / 'alertmanager.yml'}", f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="], tmp_path / "am.log"),
        _start([prometheus, f"--config.file={out / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prom.log"),
    ]
    try:
        started = time.monotonic()
        while time.monotonic() - started < DEADLINE_S:
            if until():
                return time.monotonic() - started
            assert all(p.poll() is None for p in procs), (tmp_path / "prom.log").read_text()[-2000:] + \
                (tmp_path / "am.log").read_text()[-2000:]
            time.sleep(0.5)
        pytest.fail(f"not within {DEADLINE_S} s\n" + served.log_text()[-3000:] + (tmp_path / "am.log").read_text()[-2000:])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def _refused(served: Served) -> list[dict[str, Any]]:
    lines = (state_dir(served.project) / "audit.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["what"] == "webhook refused"]


def test_a_fatal_xid_scraped_by_prometheus_ends_quarantined_through_alertmanager_with_the_token(
        served: Served, stub_exporter: tuple[int, dict[str, str]], tmp_path: Path) -> None:
    slot = sorted(pool_doc(served.project)["nodes"])[3]
    token_file = str(state_dir(served.project) / "webhook.token")  # Alertmanager reads the stack's token file
    took = _chain(served, stub_exporter, tmp_path, slot, token_file,
                  lambda: pool_doc(served.project)["nodes"][slot]["state"] != "admitted")
    node = pool_doc(served.project)["nodes"][slot]
    assert node["reason_code"] == "GpuXidFatal" and _refused(served) == []
    others = [n for s, n in pool_doc(served.project)["nodes"].items() if s != slot]
    assert all(n["state"] == "admitted" for n in others)
    print(f"alert to quarantine through Prometheus and Alertmanager, with the token: {took:.1f} s")


def test_alertmanager_without_the_token_is_refused_and_nothing_happens(
        served: Served, stub_exporter: tuple[int, dict[str, str]], tmp_path: Path) -> None:
    slot = sorted(pool_doc(served.project)["nodes"])[3]
    _chain(served, stub_exporter, tmp_path, slot, None, lambda: len(_refused(served)) >= 1)
    refused = _refused(served)
    assert refused[0]["details"]["status"] == 401 and refused[0]["details"]["path"] == "/"
    assert all(n["state"] == "admitted" for n in pool_doc(served.project)["nodes"].values())
