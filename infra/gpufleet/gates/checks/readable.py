"""Unreadable is not broken: an output the parsers cannot read gets "unreadable / tool failed:
retest", never a hardware verdict and never a pass.

Why one check over every file: each parser lists what it could not read (`problems`), but a
check that only looks at the values it found sees an XML `-q -x`, a garbled table or an empty
journal as "0 GPUs", "no links" or "no Xid". Here every collected file's problems become one
REMEDIATE result (`unreadable-<file>`: collect again; a second unreadable output quarantines
through the retest rule), and the hardware checks step aside when their own source is
unreadable (`source_unreadable`). A tool that is absent is `tool-missing-<tool>` (checks.common).
"""

from __future__ import annotations

from gpufleet.gates import bundle as B
from gpufleet.gates.checks.evidence import NodeEvidence
from gpufleet.gates.parsers import efa, nccl_tests, nvidia_smi
from gpufleet.gates.parsers.common import ERROR_SENTINELS, missing_tool
from gpufleet.gates.settings import GateSettings
from gpufleet.gates.verdict import CheckResult, Verdict, check_result

REF = "infra/gpufleet/gates/checks/readable.py (issue 19: unreadable is not broken)"
RETEST = "unreadable / tool failed: retest"


def unreadable_result(check_id: str, severity: str, expected: object, name: str, problems: tuple[str, ...] | list[str],
                      research_ref: str = REF) -> CheckResult:
    """REMEDIATE `unreadable-<file stem>`: the output says nothing about the hardware; collect again."""
    stem = name.rsplit(".", 1)[0]
    why = "; ".join(problems)
    return check_result(check_id, severity, f"unreadable: {why}"[:300], str(expected), Verdict.REMEDIATE,
                        f"unreadable-{stem}"[:63], f"{name}: {RETEST} ({why[:400]})", research_ref)


def _gpu_error_values(problems: tuple[str, ...]) -> list[str]:
    return [p for p in problems if any(p.endswith(f"= {s}") for s in ERROR_SENTINELS)]


def file_problems(ev: NodeEvidence, name: str) -> tuple[str, ...]:
    """What the parser could not read in this collected file (empty when it read everything,
    when the file is absent, or when its tool is absent: those have their own results)."""
    f = ev.bundle.get(name)
    if not f.collected or missing_tool(f.text, f.exit_code) is not None:
        return ()
    if name in (B.QUERY_GPU, B.REMAPPED_ROWS):
        table = ev.query_table if name == B.QUERY_GPU else ev.remapped_table
        errors = set(_gpu_error_values(table.problems)) if table is not None else set()
        return tuple(p for p in (table.problems if table is not None else ()) if p not in errors)
    if name == B.SMI_Q:
        q = ev.__dict__.get("smi_q")  # parsed already by a check; else the document-level scan is enough
        if q is None:
            return nvidia_smi.q_problems(f.text)
        return tuple(p for p in q.problems if p not in _gpu_error_values(q.problems))
    if name == B.NVLINK_S:
        return ev.nvlink.problems if ev.nvlink is not None else ()
    if name == B.TOPO_M:
        return ev.topo.problems if ev.topo is not None else ()
    if name == B.KERNEL_LOG:
        return _kernel_problems(ev)
    if name == B.FI_INFO:
        fi = ev.fi_info
        return tuple(p for p in fi.problems if p != "fi_info is not installed") if fi is not None else ()
    if name == B.LSPCI_EFA:
        return efa.lspci_problems(f.text) + ((f"exit code {f.exit_code}",) if f.exit_code not in (None, 0) else ())
    if name == B.FABRIC_QUERY:
        t = ev.fabric_table
        return t.problems if t is not None else ()
    if name == B.VERSIONS:  # per-key problems are each version's own result (missing-version-<key>)
        v = ev.versions
        return tuple(p for p in v.problems if ":" not in p.split(" ", 1)[0]) if v is not None else ()
    if name in (B.NCCL_INTRA, B.NCCL_INTRA_JSON):
        return ev.intra_problems if ev.intra_source == name else _unjudged_intra_problems(ev, name)
    return ()


def _unjudged_intra_problems(ev: NodeEvidence, name: str) -> tuple[str, ...]:
    """The problems of the intra-node file the check did not judge (the text table when the -J
    document has rows, the -J document when the text was judged instead): one output of a
    run that reads and one that does not must not let the readable one silently win. Not said
    when the run failed (its own result says so) or when the collector recorded no -J (exit 3)."""
    f, run = ev.bundle.get(name), ev.bundle.get(B.NCCL_INTRA)
    if not f.collected or f.exit_code not in (None, 0) or run.exit_code not in (None, 0) or not f.text.strip():
        return ()
    if missing_tool(f.text, f.exit_code) is not None:
        return ()
    res = nccl_tests.parse_json(f.text) if name == B.NCCL_INTRA_JSON else nccl_tests.parse_text(f.text)
    extra = (f"{len(res.unparsed)} result line(s) in no known layout: {res.unparsed[0][:80]!r}",) \
        if res.unparsed else ()
    return tuple(p for p in res.problems if p != "no result rows" or name == B.NCCL_INTRA_JSON) + extra


def _kernel_problems(ev: NodeEvidence) -> tuple[str, ...]:
    f = ev.bundle.get(B.KERNEL_LOG)
    log = ev.kernel
    out = list(log.problems) if log is not None else []
    if not f.text.strip():
        out.append("empty output: journalctl -k / dmesg printed nothing")
    elif log is not None and log.lines == 0:
        out.append("no kernel log lines (`-- No entries --`): a booted kernel always logs")
    if f.exit_code not in (None, 0):
        out.append(f"exit code {f.exit_code}")
    return tuple(out)


# the files a node's checks read, in bundle order (dcgmi-diag.json: check_dcgm reads its own problems)
READ_FILES = (B.QUERY_GPU, B.REMAPPED_ROWS, B.SMI_Q, B.NVLINK_S, B.TOPO_M, B.KERNEL_LOG, B.FI_INFO, B.LSPCI_EFA,
              B.FABRIC_QUERY, B.VERSIONS, B.NCCL_INTRA, B.NCCL_INTRA_JSON)


def check_readable(ev: NodeEvidence, s: GateSettings) -> list[CheckResult]:
    """One REMEDIATE per unreadable file, one PASS when every file read cleanly."""
    out = []
    for name in READ_FILES:
        problems = file_problems(ev, name)
        if problems:
            out.append(unreadable_result(f"readable.{name}", "R", "every line in a known shape", name, problems))
    errors = [p for name in (B.QUERY_GPU, B.REMAPPED_ROWS, B.SMI_Q) for p in _source_error_values(ev, name)]
    if errors:
        out.append(check_result("readable.gpu-error-values", "R", "; ".join(errors)[:300], "no [GPU is lost] / "
                                "[Unknown Error]", Verdict.REMEDIATE, "nvidia-smi-gpu-error",
                                f"nvidia-smi printed error values ({'; '.join(errors[:4])}): reset the GPU or reboot, "
                                "then retest", REF))
    if not out:
        out.append(check_result("readable", "R", "every collected output read", "every line in a known shape",
                                Verdict.PASS, research_ref=REF))
    return out


def _source_error_values(ev: NodeEvidence, name: str) -> list[str]:
    f = ev.bundle.get(name)
    if not f.collected:
        return []
    if name == B.SMI_Q and not any(v in f.text for v in ERROR_SENTINELS):
        return []  # no error value anywhere in the text: no need to parse the whole -q for one
    parsed = ev.query_table if name == B.QUERY_GPU else ev.remapped_table if name == B.REMAPPED_ROWS else ev.smi_q
    return _gpu_error_values(parsed.problems) if parsed is not None else []


def source_unreadable(ev: NodeEvidence, check_id: str, severity: str, expected: object, *names: str,
                      research_ref: str = REF) -> CheckResult | None:
    """The unreadable result for a check whose every source among `names` is unreadable (or
    the first unreadable one when the check needs them all), or None when one reads."""
    bad = [(n, p) for n in names if (p := file_problems(ev, n))]
    if not bad:
        return None
    name, problems = bad[0]
    return unreadable_result(check_id, severity, expected, name, problems, research_ref)
