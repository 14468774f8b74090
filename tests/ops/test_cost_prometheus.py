"""The cost report's utilisation from a real Prometheus (Debian's): two hours of DCGM GPU
utilisation written into its TSDB with `promtool tsdb create-blocks-from openmetrics` (the
documented backfill), then read back through the HTTP API's query_range by the report's own
client. A busy node and an idle one give a job at 90% and a job at 10%; a Prometheus that is not
there, or a query it refuses, is an error that names it, never a zero."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from gpufleet.cost import prometheus as prom
from gpufleet.monitoring.metrics import GPU_UTIL
from tests.ops.conftest import ensure_tool


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


END = (int(time.time()) // 60) * 60 - 3600  # an hour ago: whole minutes, well behind the head block
START = END - 2 * 3600
UTIL = {"busy-node": 90, "idle-node": 10}


def openmetrics() -> str:
    """Per node two GPUs, one sample a minute, in the exposition dcgm-exporter serves (labels gpu, node)."""
    lines = [f"# TYPE {GPU_UTIL} gauge", f"# HELP {GPU_UTIL} GPU utilization (in %)."]
    for ts in range(START, END + 1, 60):
        for node, util in UTIL.items():
            for gpu in (0, 1):
                lines.append(f'{GPU_UTIL}{{gpu="{gpu}",node="{node}"}} {util + (gpu * 2 - 1) * 5} {ts}')
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    promtool, server = ensure_tool("promtool"), ensure_tool("prometheus")
    root = tmp_path_factory.mktemp("cost-prometheus")
    (root / "metrics.om").write_text(openmetrics())
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(root / "metrics.om"), str(root / "tsdb")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = _free_port()
    log = (root / "prometheus.log").open("w")
    proc = subprocess.Popen([server, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={root / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready: " + (root / "prometheus.log").read_text()[-2000:])
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_jobs_get_their_nodes_utilisation_from_a_real_prometheus(prometheus_url: str) -> None:
    series, step = prom.fetch(prom.HttpRangeQuery(prometheus_url), (float(START), float(END)))
    assert set(series) == set(UTIL) and step == 300
    assert len(series["busy-node"].times) == (END - START) // 300 + 1
    span = (float(START + 1800), float(END - 1800))
    assert prom.job_utilisation(series, ["busy-node"], span) == pytest.approx(90)
    assert prom.job_utilisation(series, ["idle-node"], span) == pytest.approx(10)
    assert prom.job_utilisation(series, ["busy-node", "idle-node"], span) == pytest.approx(50)
    assert prom.job_utilisation(series, ["busy-node"], (float(END + 600), float(END + 900))) is None  # no data: unmeasured


def test_a_query_prometheus_refuses_is_an_error_with_its_reason(prometheus_url: str) -> None:
    with pytest.raises(prom.PrometheusError, match="HTTP 400.*parse error"):
        prom.HttpRangeQuery(prometheus_url)("avg by (", START, END, 300)


def test_prometheus_out_of_reach_is_an_error_not_zero_utilisation(tmp_path: Path) -> None:
    with pytest.raises(prom.PrometheusError, match="unreachable"):
        prom.fetch(prom.HttpRangeQuery(f"http://127.0.0.1:{_free_port()}", timeout_s=5), (float(START), float(END)))
