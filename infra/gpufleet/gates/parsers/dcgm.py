"""`dcgmi diag -j` (DCGM 3.x and 4.x JSON) and the text-table fallback.

Why version-aware: the JSON shape changed in 4.x ("DCGM GPU Diagnostic" + per-result gpu_id
vs "DCGM Diagnostic" + entity_group/entity_id + metadata), and the `error_severity` enum changed
at DCGM 3.3.1 (research section 0 item 4). The number means nothing until the version is known.
"""

from __future__ import annotations

import json
import re
from enum import Enum

from gpufleet.gates.parsers.common import ParseModel


class DcgmSeverity(str, Enum):
    NONE = "NONE"
    MONITOR = "MONITOR"
    ISOLATE = "ISOLATE"
    UNKNOWN = "UNKNOWN"
    TRIAGE = "TRIAGE"
    CONFIG = "CONFIG"
    RESET = "RESET"


_SEV_OLD = {0: DcgmSeverity.MONITOR, 1: DcgmSeverity.ISOLATE, 2: DcgmSeverity.UNKNOWN}  # DCGM <= 3.2.x
_SEV_NEW = {0: DcgmSeverity.NONE, 1: DcgmSeverity.MONITOR, 2: DcgmSeverity.ISOLATE, 3: DcgmSeverity.UNKNOWN,
            4: DcgmSeverity.TRIAGE, 5: DcgmSeverity.CONFIG, 6: DcgmSeverity.RESET}  # DCGM >= 3.3.1
SEVERITY_ENUM_CHANGED_AT = (3, 3, 1)


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    nums = re.findall(r"\d+", version)
    return tuple(int(n) for n in nums[:3]) if nums else None


def severity(value: int, dcgm_version: str | None) -> DcgmSeverity:
    """Interpret `error_severity` by DCGM version; unknown version reads the >= 3.3.1 enum."""
    v = version_tuple(dcgm_version)
    table = _SEV_OLD if v is not None and v < SEVERITY_ENUM_CHANGED_AT else _SEV_NEW
    return table.get(value, DcgmSeverity.UNKNOWN)


class DcgmWarning(ParseModel):
    text: str
    error_id: int | None = None
    severity: DcgmSeverity | None = None
    severity_raw: int | None = None


class DcgmResult(ParseModel):
    category: str
    test: str
    status: str  # Pass, Fail, Skip, Warn, Not Run (as printed)
    gpu: int | None = None  # None: the whole test / not attributed
    warnings: tuple[DcgmWarning, ...] = ()
    info: tuple[str, ...] = ()

    @property
    def status_norm(self) -> str:
        return self.status.strip().split(" ")[0].lower()


class DcgmDiag(ParseModel):
    format: str  # "4.x-json", "3.x-json", "text"
    version: str | None = None
    driver_version: str | None = None
    results: tuple[DcgmResult, ...] = ()
    runtime_error: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def tests(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.test for r in self.results))


def parse_diag(text: str) -> DcgmDiag:
    """JSON when there is a JSON object in the text (dcgmi may print text before it), else the table."""
    start = text.find("{")
    if start >= 0:
        try:
            doc = json.loads(text[start:])
        except (json.JSONDecodeError, RecursionError) as exc:
            if "+---" in text:
                return parse_text(text)
            if "DCGM Diagnostic" in text:  # a 4.x document cut off (a timeout, a full disk)
                return DcgmDiag(format="4.x-json", problems=(f"partial DCGM 4.x document: cut off ({exc})",))
            return DcgmDiag(format="unknown", problems=(f"invalid JSON: {exc}",))
        if not isinstance(doc, dict):
            return DcgmDiag(format="unknown", problems=(f"the JSON document is a {type(doc).__name__}, not an object",))
        try:
            return parse_json(doc)
        except (AttributeError, TypeError, ValueError) as exc:  # a value of a shape no dcgmi writes
            return DcgmDiag(format="unknown", problems=(f"unreadable DCGM JSON: {type(exc).__name__}: {exc}"[:300],))
    return parse_text(text)


# (category, test, status, gpu, info) -> the result without warnings; every healthy node of a fleet
# prints the same ones (tests x GPUs), so ~24 models serve 1,000s of nodes. Results are frozen.
_plain: dict[tuple[str, str, str, int | None, tuple[str, ...]], DcgmResult] = {}


def _plain_result(category: str, test: str, status: str, gpu: int | None, info: tuple[str, ...]) -> DcgmResult:
    key = (category, test, status, gpu, info)
    r = _plain.get(key)
    if r is None:
        r = DcgmResult(category=category, test=test, status=status, gpu=gpu, info=info)
        if len(_plain) >= 4096:
            _plain.clear()
        _plain[key] = r
    return r


_FRAGMENT_KEYS = frozenset({"test_categories", "entity_groups", "metadata"})  # 4.x schema: top level and body


def parse_json(doc: dict) -> DcgmDiag:
    problems: list[str] = []
    if "DCGM Diagnostic" in doc:
        fmt, body = "4.x-json", doc["DCGM Diagnostic"]
        meta = doc.get("metadata") or {}
        version = meta.get("version") or body.get("version")
        driver = meta.get("Driver Version Detected")
    elif "DCGM GPU Diagnostic" in doc:
        fmt, body = "3.x-json", doc["DCGM GPU Diagnostic"]
        version = doc.get("version")
        driver = doc.get("Driver Version Detected")
    elif _FRAGMENT_KEYS & set(doc):  # DCGM 4.x pieces without the document around them
        return DcgmDiag(format="4.x-json", problems=(
            f"partial DCGM 4.x document: {', '.join(sorted(_FRAGMENT_KEYS & set(doc)))} without the "
            "'DCGM Diagnostic' object the 4.x schema requires (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json)",))
    else:
        return DcgmDiag(format="unknown", problems=("neither 'DCGM Diagnostic' nor 'DCGM GPU Diagnostic' found",))
    if not isinstance(body, dict):
        return DcgmDiag(format=fmt, problems=("diagnostic body is not an object",))
    if fmt == "4.x-json" and "metadata" not in doc:
        problems.append("partial DCGM 4.x document: no 'metadata' (the schema requires metadata.version)")
    if version is None:
        problems.append("DCGM version not in the output; severities read with the >= 3.3.1 enum")
    results: list[DcgmResult] = []
    for cat in body.get("test_categories") or []:
        cname = str(cat.get("category", "?"))
        for test in cat.get("tests") or []:
            tname = str(test.get("name", "?"))
            for res in test.get("results") or []:
                # 4.x: entity_id; 3.x: gpu_id, or gpu_ids as a string ("0"; "0,1" names no single GPU)
                gpu = res.get("entity_id", res.get("gpu_id"))
                if gpu is None and isinstance(res.get("gpu_ids"), (str, int)) and "," not in str(res["gpu_ids"]):
                    gpu = str(res["gpu_ids"]).strip() or None
                group = res.get("entity_group")
                if group not in (None, "GPU"):
                    gpu = None
                try:
                    gpu_i = int(gpu) if gpu is not None else None
                except (TypeError, ValueError):
                    gpu_i = None
                    problems.append(f"{tname}: unreadable gpu id {gpu!r}")
                warnings = []
                for w in res.get("warnings") or []:
                    if isinstance(w, str):
                        warnings.append(DcgmWarning(text=w))
                        continue
                    raw = w.get("error_severity")
                    sev = severity(int(raw), version) if isinstance(raw, int) else None
                    warnings.append(DcgmWarning(text=str(w.get("warning", "")), error_id=w.get("error_id"),
                                                severity=sev, severity_raw=raw))
                info = res.get("info") or []
                info_t = (info,) if isinstance(info, str) else tuple(str(i) for i in info)
                status = str(res.get("status", "?"))
                if warnings:
                    results.append(DcgmResult(category=cname, test=tname, status=status, gpu=gpu_i,
                                              warnings=tuple(warnings), info=info_t))
                else:
                    results.append(_plain_result(cname, tname, status, gpu_i, info_t))
    runtime_error = body.get("runtime_error")
    if not results and not runtime_error:
        problems.append("no test results")
    return DcgmDiag(format=fmt, version=version, driver_version=driver, results=tuple(results),
                    runtime_error=runtime_error, problems=tuple(problems))


_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_ROW = re.compile(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|\s*$")


def parse_text(text: str) -> DcgmDiag:
    """The `dcgmi diag -r N` table: sections, `| Test | Pass - All |`, continuation rows."""
    category = ""
    meta: dict[str, str] = {}
    results: list[DcgmResult] = []
    unparsed: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        m = _SECTION.match(s)
        if m:
            category = m.group(1)
            continue
        if s.startswith("+") or s.startswith("|=") or not s:
            continue
        m = _ROW.match(s)
        if not m:
            if not s.startswith("Successfully") and "$" not in s:
                unparsed.append(s)
            continue
        name, value = m.group(1), m.group(2)
        if name == "Diagnostic" and value == "Result":
            continue
        if category == "Metadata":
            meta[name] = value
            continue
        if not name and results:  # continuation: warning / info text of the previous row
            prev = results[-1]
            if value.lower().startswith("warning"):
                results[-1] = prev.model_copy(update={"warnings": prev.warnings + (DcgmWarning(text=value),)})
            else:
                results[-1] = prev.model_copy(update={"info": prev.info + (value,)})
            continue
        status = value.split(" - ")[0].strip() or "?"
        gpus = _gpus_in(value)
        if gpus:
            results.extend(DcgmResult(category=category, test=name, status=status, gpu=g) for g in gpus)
        else:
            results.append(DcgmResult(category=category, test=name, status=status))
    problems = [] if results else ["no test rows found"]
    if unparsed:
        problems.append(f"{len(unparsed)} unparsed line(s)")
    return DcgmDiag(format="text", version=meta.get("DCGM Version"), driver_version=meta.get("Driver Version Detected"),
                    results=tuple(results), problems=tuple(problems))


def _gpus_in(value: str) -> list[int]:
    """'Fail - GPU: 0, 3' -> [0, 3]; 'Pass - All' -> []."""
    m = re.search(r"GPUs?:\s*([\d,\s]+)", value)
    return [int(x) for x in re.findall(r"\d+", m.group(1))] if m else []
