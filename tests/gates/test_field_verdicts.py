"""Verdicts the field showed wrong (issue 19), each on a real capture where one exists.

Every test here failed before its fix: a healthy real EFA pair quarantined at its connection
set-up, libfabric's "1k" counts read as 1024, an unreadable output judged as hardware, a
nccl-tests 2.19 `-J` file crashing the gate, a beta plugin passing a release pin by prefix.
"""

from __future__ import annotations

import pytest

from gpufleet.gates import acceptance as A
from gpufleet.gates.bundle import Bundle, Manifest
from gpufleet.gates.parsers import fabtests
from gpufleet.gates.verdict import Verdict
from gpufleet.spec import AcceptanceConfig
from gpufleet import catalog

from .conftest import read_real

P5 = catalog.get("p5.48xlarge")
PINGPONG = "fi_pingpong_efa_test_sh__aws_cdi_sdk_install_guide.txt"


def _bundle(files: dict[str, str], slot: str = "n0") -> Bundle:
    return Bundle(path=f"/mem/{slot}", manifest=Manifest(slot=slot), files=dict(files))


def _latency(text: str, cfg: AcceptanceConfig = AcceptanceConfig()):
    f = A.pair_files("a", "b")
    return A._efa_latency(_bundle({f["pingpong"]: text}), "net.efa-latency[a--b]", f["pingpong"], cfg)


# --- item 2: fi_pingpong latency ------------------------------------------------------------

def test_the_real_efa_pair_passes_on_its_small_sizes_not_its_set_up_row():
    """efa_test.sh's real table: 1362 us at 64 B (10 iterations: the connection set-up), then
    19.90/17.40/18.85 us at 256 B-4 KiB. Judged from the least small-size row: 17.4 us."""
    r = _latency(read_real(PINGPONG))
    assert r.verdict is Verdict.PASS, r
    assert r.measured.startswith("17.4 usec/xfer at 1024 B (10 iterations)")


def test_a_slow_link_is_still_quarantined_on_its_small_sizes():
    text = read_real(PINGPONG).replace("19.90", "99.90").replace("17.40", "97.40").replace("18.85", "98.85")
    r = _latency(text)
    assert (r.verdict, r.reason_code) == (Verdict.QUARANTINE, "efa-latency-high") and "97.4" in r.message


def test_a_table_of_only_its_set_up_row_is_a_retest_not_a_quarantine():
    lines = read_real(PINGPONG).splitlines()
    only_first = "\n".join(lines[:4]) + "\n"  # banner, header, the 64 B row at 10 iterations
    r = _latency(only_first)
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "efa-latency-too-few-iterations")


def test_rows_with_too_few_iterations_are_not_judged():
    text = read_real(PINGPONG).replace("  10      =10  ", "  5       =5   ")
    assert [r.iterations for r in fabtests.parse_table(text).rows] == [5] * 6
    assert _latency(text).reason_code == "efa-latency-too-few-iterations"


@pytest.mark.parametrize("token,value", [("10", 10), ("1k", 1000), ("=10k", 10_000), ("2m", 2_000_000),
                                         ("1b", 10**9), ("1.2k", None), ("x", None)])
def test_counts_read_as_fabtests_cnt_str_prints_them(token, value):
    """fabtests common/shared.c cnt_str: k = 1000, m = 10^6, b = 10^9, truncated, no decimals."""
    assert fabtests.count_value(token) == value


def test_an_unreadable_count_is_a_parser_problem_and_a_retest():
    text = read_real(PINGPONG).replace("  10      =10  ", "  1.5k    =10  ", 1)
    assert fabtests.parse_table(text).problems
    r = _latency(text)
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "efa-test-unreadable")
    assert "unreadable / tool failed: retest" in r.message


def test_a_missing_fi_pingpong_is_tool_missing_not_a_link_failure():
    r = _latency("bash: line 1: fi_pingpong: command not found\n")
    assert (r.verdict, r.reason_code) == (Verdict.REMEDIATE, "tool-missing-fi_pingpong")
