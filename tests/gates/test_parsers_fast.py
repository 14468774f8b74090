"""The fast parser paths read exactly what the per-line reference parsers read.

Why a differential test: the fast paths (whole-text regexes, str.partition, caches) exist only
for speed (bench/bench_gates.py); tolerance of format drift must not change. Inputs: the real
captures, our fixtures, synthetic nodes with every fault, and mutations of each (CRLF, tabs,
indentation, trailing blanks, spaces before ':', odd lines, unicode, truncation).
"""

from __future__ import annotations

import json
import random

import pytest

from gpufleet.gates import synth
from gpufleet.gates.checks import evidence
from gpufleet.gates.parsers import common, dcgm, efa, nvidia_smi
from tests.gates import _reference_parsers as ref
from tests.gates.conftest import OWN, REAL


def _texts(glob_words: tuple[str, ...], make) -> list[str]:
    out = []
    for root in (REAL, OWN):  # both are in the repository: a missing folder fails here (iterdir raises)
        out += [p.read_text(encoding="utf-8") for p in sorted(root.iterdir())
                if p.is_file() and any(w in p.name for w in glob_words)]
    for f in sorted(synth.FAULTS):
        out.append(make(synth.NodeSpec(slot="n0", faults=frozenset({f}))))
    return out


def _mutations(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = text.splitlines()
    variants = [
        text, "", "\n", text.replace("\n", "\r\n"), text.replace("\n", "\r"), text.replace("    ", "\t"),
        text.replace(": ", " : "), text.replace(": ", ":   "), text.replace(": ", "\t: "), text.replace(":", ": "),
        "\n".join(ln + "  " for ln in lines), "\n".join("  " + ln for ln in lines), text.lstrip(),
        "\n\n" + text + "\n\n", text.replace("\n", "\n\n"), text[: len(text) // 2], text + "garbage line\n",
        "preamble\n" + text, text.replace("GB/s", "Gb/s"), text.replace("26.562 GB/s", "<inactive>"),
        text.replace("Link 3: ", "Link 3:  "), text.replace("Link 4: 26.562 GB/s", "Link 4:   "),
        text.replace("Link 5:", "Link x5:"), text.replace("GPU 1:", "GPU  1:"), text.replace("(UUID", "\u00a0(UUID"),
        text.replace("domain:", "domain :"), text.replace("domain:", "Domain:"), text.replace("type:", "ty pe:"),
        text.replace("provider: efa", "provider: efa;ofi_rxd", 3), text.replace("-rdm", "-dgrm", 5),
        text.replace("\n", "\u2028", 3), text.replace("\n", "\x0c", 2), text.replace("a", "\u00e4", 2),
        text.replace("Elastic Fabric Adapter", "ELASTIC FABRIC ADAPTER", 2),
        text.replace("Elastic Fabric Adapter", "Elaſtic Fabric Adapter", 1), text + "\n0000:10:1c.0 1d0f:efa1\n",
        text + "\n0000:10:1c.0 1d0f:efa10\n", text.replace(" ", "\u3000", 4), "fi_getinfo: -61 (No data available)\n",
    ]
    for _ in range(12):  # random line drops, duplicates and shuffles of neighbours
        ls = list(lines)
        for _ in range(rng.randint(1, 4)):
            if not ls:
                break
            i = rng.randrange(len(ls))
            op = rng.choice(("drop", "dup", "swap", "blank"))
            if op == "drop":
                ls.pop(i)
            elif op == "dup":
                ls.insert(i, ls[i])
            elif op == "swap" and i + 1 < len(ls):
                ls[i], ls[i + 1] = ls[i + 1], ls[i]
            else:
                ls.insert(i, " " * rng.randint(0, 3))
        variants.append("\n".join(ls) + rng.choice(("", "\n")))
    return variants


FI = _texts(("fi_info",), synth.fi_info)
NVL = _texts(("nvlink_s", "nvlink-s"), synth.nvlink_s)
LSPCI = _texts(("lspci",), synth.lspci) + ["00:05.0 Ethernet controller: Amazon.com, Inc. Elastic Network Adapter\n"]


@pytest.mark.parametrize("i", range(len(FI)))
def test_fi_info_matches_reference(i):
    for k, t in enumerate(_mutations(FI[i], i)):
        assert efa.parse_fi_info(t) == ref.parse_fi_info(t), (i, k)
        assert efa.parse_fi_info.uncached(t) == ref.parse_fi_info(t), (i, k)


@pytest.mark.parametrize("i", range(len(NVL)))
def test_nvlink_matches_reference(i):
    for k, t in enumerate(_mutations(NVL[i], i)):
        assert nvidia_smi.parse_nvlink_status(t) == ref.parse_nvlink_status(t), (i, k)
        assert nvidia_smi.parse_nvlink_status(t) == ref.parse_nvlink_status(t), (i, k)  # again, from the caches


@pytest.mark.parametrize("i", range(len(LSPCI)))
def test_lspci_matches_reference(i):
    for k, t in enumerate(_mutations(LSPCI[i], i)):
        assert efa.parse_lspci(t) == ref.parse_lspci(t), (i, k)
        assert efa.parse_lspci.uncached(t) == ref.parse_lspci(t), (i, k)


VALUES = ["", " ", "0", "-1", "1.5", "81559 MiB", "700.00 W", " 41 ", "0x1F", "0x0000000000000001", "1e3", "inf",
          "-inf", "nan", "N/A", "[N/A]", "5e", "5 e", "1_000", "١٢", "12 %", "3 KB/s", "3 W(avg)", "3 W(AVG)",
          "5 W\n", "-", "--1", "1.", ".5", "26.562 GB/s", "2.5x", "x16", "Enabled", "²", "1²", "5\u00a0W", "0 us",
          "Yes", "no", "Not Active", "not active", "None", "True", "FALSE", "Disabled ", "Active\t", "yes!", "0x1F us",
          "1e400", "0X10", "0x", "1.0", "16 x"]


@pytest.mark.parametrize("v", VALUES)
def test_number_helpers_match_reference(v):
    assert common.strip_unit(v) == ref.strip_unit(v)
    a, b = common.to_float(v), ref.to_float(v)
    assert (a == b) or (a != a and b != b)  # nan == nan for this purpose
    for w in (v, v.upper(), v.title(), " " + v.lower()):
        for _ in range(2):  # again, from the caches
            assert common.to_int(w) == ref.to_int(w), w
            assert common.yes_no(w) == ref.yes_no(w), w


def _csv_mutations(text: str, seed: int) -> list[str]:
    """The generic mutations plus cell-level ones: sentinels, units, quoting, case, spacing."""
    rng = random.Random(seed)
    out = _mutations(text, seed) + [
        text.replace(", ", ","), text.replace(", ", " ,  "), text.replace("Enabled", "[N/A]", 3),
        text.replace("Enabled", "[GPU is lost]", 2), text.replace("No", "[Unknown Error]", 1),
        text.replace("No", "no "), text.replace("No", "1", 4), text.replace("Yes", "0"), text.replace("None", "Reset"),
        text.replace(", 0,", ", 0 us,"), text.replace(", 16,", ", 16x,"), text.replace(", 16,", ', "16",'),
        text.replace("NVIDIA", '"NVIDIA, Inc.', 1), text.replace("0x0000000000000001", "0x41", 3),
        text.replace("0x0000000000000001", "1 W(avg)"), text.replace(", 5,", ", 5.0,"), text.replace(", 5,", ", Gen5,"),
        text.replace("Completed", "In Progress", 1), text.replace("pci.bus_id", "gpu_bus_id"),
        text.replace("remapped_rows.pending", "remapped_rows.failure"), text.replace("Disabled", "[Not Supported]"),
        text.replace(" [us]", ""), text.replace("clocks_event_reasons", "clocks_throttle_reasons"),
        text.replace("\n", ",extra\n", 2), text.split("\n", 1)[-1],
    ]
    cells = text.replace("\n", ", ").split(", ")
    for _ in range(8):  # random cell swaps into random positions
        t = text
        for _ in range(rng.randint(1, 6)):
            t = t.replace(rng.choice(cells), rng.choice(cells + ["[N/A]", "[GPU is lost]", "", "-1", "12 %"]), 1)
        out.append(t)
    return out


CSV = _texts(("query_gpu", "query-gpu", "remapped"), synth.query_gpu_csv)


@pytest.mark.parametrize("i", range(len(CSV)))
def test_query_csv_matches_reference(i):
    for k, t in enumerate(_csv_mutations(CSV[i], i)):
        assert nvidia_smi.parse_query_csv(t) == ref.parse_query_csv(t), (i, k)


@pytest.mark.parametrize("i", range(len(CSV)))
def test_gpu_records_match_reference(i):
    """evidence._from_csv over QueryTable rows (units on) = the former _from_csv over QueryCsv rows."""
    for k, t in enumerate(_csv_mutations(CSV[i], i)):
        fast = [evidence._from_csv(r) for r in nvidia_smi.read_query_table(t).records()]
        assert fast == [ref.gpu_record_from_csv(r) for r in ref.parse_query_csv(t).rows], (i, k)


DCGM = [t for t in _texts(("dcgm",), synth.dcgm_diag_4x) if t.lstrip().startswith("{")]


@pytest.mark.parametrize("i", range(len(DCGM)))
def test_dcgm_json_matches_reference(i):
    """parse_json shares result models between nodes; what it returns must not change."""
    base = json.loads(DCGM[i])
    texts = [DCGM[i], DCGM[i].replace('"Pass"', '"Fail"', 2), DCGM[i].replace('"Pass"', '"Skip"'),
             DCGM[i].replace('"entity_id": 1', '"entity_id": "1"'), DCGM[i].replace('"GPU"', '"SWITCH"', 3),
             DCGM[i].replace('"entity_id": 2', '"entity_id": null'), DCGM[i].replace('"status"', '"state"', 2)]
    for k, t in enumerate(texts):
        try:
            doc = json.loads(t)
        except ValueError:
            continue
        for _ in range(2):  # again, from the shared models
            assert dcgm.parse_json(doc) == ref.parse_json(doc), (i, k)
    assert base == json.loads(DCGM[i])


@pytest.mark.parametrize("line", ["0: # size", "  12: x", "[1,0]<stdout>: 1024 x", "[1,0]<stderr>:", "1024 256 float",
                                  "  1073741824  268435456  float  sum  -1", "#  size:", ":", "", "12:", "a: b", "\u0661: x"])
def test_rank_prefix_matches_reference(line):
    assert common.strip_rank_prefix(line) == common.RANK_PREFIX.sub("", line, count=1)
