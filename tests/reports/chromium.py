"""Headless Chromium (Debian's `chromium` package) for the HTML report tests, network disabled.

Installed with apt when missing and running as root (waiting for the dpkg lock); skipped with the
reason otherwise. Every run gets a fresh profile, an unreachable proxy and a resolver that resolves
nothing, and writes a net log: a page-initiated request shows up there as a URL request whose
network isolation key is the page's file:// origin (Chromium's own background requests have none).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--hide-scrollbars",
         "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=5000"]


def binary() -> str:
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip("headless Chromium is not installed and installing it with apt needs root")
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "-y", "-q"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(apt + ["install", "chromium"], env=env, capture_output=True, timeout=900,
                      check=False).returncode != 0:  # a stale package index: update once, then it must work
        subprocess.run(apt + ["update"], env=env, capture_output=True, timeout=600, check=True)
        subprocess.run(apt + ["install", "chromium"], env=env, capture_output=True, timeout=900, check=True)
    found = shutil.which("chromium")
    assert found, "apt installed chromium but it is not on PATH"
    return found


@dataclass(frozen=True)
class Element:
    tag: str
    attrs: dict[str, str]

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_data(self, data):
        self.text.append(data)


@dataclass(frozen=True)
class Page:
    dom: str
    elements: list[Element]
    text: str
    page_requests: list[str]  # URLs the page itself asked the network for

    def find(self, tag: str, css_class: str | None = None) -> list[Element]:
        return [e for e in self.elements if e.tag == tag and (css_class is None or css_class in e.classes)]


def _page_requests(netlog: Path) -> list[str]:
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in log["events"]
            if e["type"] == start_job and str(e.get("params", {}).get("network_isolation_key", "")).startswith("file://")]


def open_page(chromium: str, html: Path, work: Path, screenshot: Path | None = None,
              window: tuple[int, int] = (1280, 2000)) -> Page:
    """Load `html` from disk; return its rendered DOM and the requests it made (and a screenshot)."""
    work.mkdir(parents=True, exist_ok=True)
    netlog = work / "netlog.json"
    base = [chromium, *FLAGS, f"--user-data-dir={work / 'profile'}", f"--log-net-log={netlog}"]
    url = html.resolve().as_uri()
    run = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    requests = _page_requests(netlog)
    if screenshot is not None:
        shot = subprocess.run(base + [f"--screenshot={screenshot}", f"--window-size={window[0]},{window[1]}", url],
                              capture_output=True, text=True, timeout=120, check=False)
        assert shot.returncode == 0 and screenshot.is_file(), shot.stderr[-2000:]
    parser = _Collect()
    parser.feed(run.stdout)
    return Page(run.stdout, parser.elements, "".join(parser.text), requests)
