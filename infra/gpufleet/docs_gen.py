"""The generated docs: the configuration reference, the reason-code runbook and a JSON Schema per
JSON document kind, all written from the code so they cannot drift from it (issue 23 items 7, 8).

`python -m gpufleet.docs_gen --update` rewrites them under docs/; `--check` (and the tests)
fails naming each stale file. Each generator is pure: a function from the code to the files' text.

- `docs/reference/configuration.md` and `docs/reference/stack.schema.json`: every `gpufleet:` key
  of a stack file from the pydantic model (`gpufleet.spec.ClusterSpec`), with its type, default,
  bounds and the comment written beside the field in spec.py.
- `docs/reference/reason-codes.md`: every reason code a gate check can give, found in the gates'
  own source (each `result(...)`/`reason_code=` call: its code, verdict, check and message), with
  what the rollout does about it and the remediation ladder day two climbs for it
  (`gpufleet.daytwo.remediation`).
- `docs/schemas/<kind>.schema.json`: the envelope (`gpufleet.envelope`) and the body of every JSON
  document a command prints or writes, from the report models where they are pydantic.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
import typing
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

PACKAGE = Path(__file__).resolve().parent
DOCS = Path("docs")


# --- configuration reference ------------------------------------------------------------------------

def _field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class, field) -> the comment written at the end of the field's line in spec.py."""
    tree = ast.parse(source)
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[tuple[str, str], str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    end = item.end_lineno or item.lineno
                    text = comments.get(end) or comments.get(item.lineno)
                    if text:
                        out[(node.name, item.target.id)] = text
    return out


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " or ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (tuple, list):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(info: FieldInfo) -> str:
    parts = []
    for m in info.metadata:
        for name, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "at least"),
                           ("max_length", "at most")):
            value = getattr(m, name, None)
            if value is not None:
                parts.append(f"{sign} {value}")
        pattern = getattr(m, "pattern", None)
        if pattern:
            parts.append(f"matches `{pattern}`")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, Enum):
        value = value.value
    return "`" + json.dumps(value, default=str) + "`"


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """The model and every model its fields reach, in first-reached order."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for info in model.model_fields.values():
            for sub in _reached(info.annotation):
                visit(sub)

    visit(root)
    return seen


def _reached(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _reached(a)]


def configuration_reference() -> dict[str, str]:
    from gpufleet import spec

    comments = _field_comments((PACKAGE / "spec.py").read_text(encoding="utf-8"))
    lines = ["# Stack configuration reference", "",
             "Generated by `python -m gpufleet.docs_gen --update` from `gpufleet.spec.ClusterSpec`; "
             "a test fails when it is stale. Do not edit by hand.", "",
             "A stack file `stacks/Pulumi.<stack>.yaml` holds one key per concern under `config:`, "
             "named `gpufleet:<concern>` (`gpufleet:cluster`, `gpufleet:rollout` ...). Keys are camelCase "
             "as written here. An unknown key, a YAML boolean where a number belongs, a repeated key, a "
             "number out of bounds or `aws:region` differing from `cluster.region` is an error naming "
             "file, line and field (exit 2). The same model as JSON Schema: "
             "[stack.schema.json](stack.schema.json).", "",
             "## Concerns", ""]
    top = spec.ClusterSpec
    for name, info in top.model_fields.items():
        alias = info.alias or name
        lines.append(f"- `gpufleet:{alias}`: {_type_name(info.annotation)} ({_default(info)})")
    for model in _models(top)[1:]:  # the concerns, then what they reach
        doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines += ["", f"## {model.__name__}", ""]
        if doc:
            lines += [doc, ""]
        lines += ["| key | type | default | bounds | notes |", "|---|---|---|---|---|"]
        for name, info in model.model_fields.items():
            note = comments.get((model.__name__, name), "").replace("|", "\\|")
            bounds = _bounds(info).replace("|", "\\|")
            kind = _type_name(info.annotation).replace("|", "\\|")
            lines.append(f"| `{info.alias or name}` | {kind} | {_default(info)} | {bounds} | {note} |")
    schema = top.model_json_schema(by_alias=True)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "title": "gpufleet stack config (the gpufleet: keys, namespace stripped)", **schema}
    return {"reference/configuration.md": "\n".join(lines) + "\n",
            "reference/stack.schema.json": json.dumps(schema, indent=2, sort_keys=True) + "\n"}


# --- reason-code runbook ----------------------------------------------------------------------------

@dataclass
class Emit:
    code: str
    verdict: str  # QUARANTINE | REMEDIATE | RETEST | ... as the check writes it (Q, R ...) or "?"
    where: str  # module:function
    message: str


@dataclass
class Reason:
    code: str
    emits: list[Emit] = field(default_factory=list)


VERDICT_WORDS = {"Q": "quarantine", "R": "remediate", "W": "warn", "P": "pass",  # gates.checks.common's letters
                 "QUARANTINE": "quarantine", "REMEDIATE": "remediate", "WARN": "warn", "PASS": "pass"}
_CODE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9<>_]+)+$")


def _text(node: ast.AST | None) -> str:
    """A string literal as written, an f-string with `<name>` for each placeholder."""
    if node is None:
        return ""
    if isinstance(node, ast.Subscript):  # f"unreadable-{stem}"[:63]
        return _text(node.value)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            else:
                inner = part.value if isinstance(part, ast.FormattedValue) else part
                out.append("<" + re.sub(r"[^A-Za-z0-9_.]+", "_", ast.unparse(inner)).strip("_").split(".")[-1] + ">")
        return "".join(out)
    return ""


def _verdict(node: ast.AST | None) -> str:
    if node is None:
        return "?"
    name = ast.unparse(node).split(".")[-1]
    return VERDICT_WORDS.get(name, f"by `{ast.unparse(node)}`")


def scan_reason_codes(root: Path | None = None) -> dict[str, Reason]:
    """Every reason code the gate checks and the rollout's stages write, found in their source: a
    `reason_code=` keyword; a code written right after a verdict (`result(cid, sev, measured,
    expected, Q, "gpu-count", message)`, `_r(cid, measured, expected, R, "image-gpus-not-visible",
    message)`, `return R, "image-missing", why`) or right before one (the fabric health table's
    `("bandwidth_degraded", True, "fabric-bandwidth-degraded", Q, ...)`); a `code = ...` the check
    passes on; a code stored as a quarantine or a stage failure (`failures[slot] = (code, why, ...)`)."""
    roots = [root] if root is not None else [PACKAGE / "gates", PACKAGE / "rollout"]
    found: dict[str, Reason] = {}

    def add(code: str, verdict: str, where: str, message: str) -> None:
        reason = found.setdefault(code, Reason(code))
        same = [e for e in reason.emits if e.where == where]
        if not same:
            reason.emits.append(Emit(code, verdict, where, message))
        elif same[0].verdict == "?" or (not same[0].message and message):
            same[0].verdict = verdict if verdict != "?" else same[0].verdict
            same[0].message = same[0].message or message

    for path in sorted(p for r in roots for p in r.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = path.relative_to(PACKAGE.parent).with_suffix("").as_posix().replace("/", ".")
        scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for scope in [*scopes, tree]:
            where = f"{module}:{scope.name}" if not isinstance(scope, ast.Module) else module
            nodes = ast.walk(scope) if not isinstance(scope, ast.Module) else (
                n for stmt in scope.body if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                for n in ast.walk(stmt))
            for node in nodes:
                if isinstance(node, ast.Assign):
                    _scan_assign(node, where, add)
                if isinstance(node, ast.Call):
                    kw = {k.arg: k.value for k in node.keywords if k.arg}
                    if "reason_code" in kw:
                        for c in _branches(kw["reason_code"]):
                            if _is_code(c):
                                add(_text(c), _verdict(kw.get("verdict")), where, _text(kw.get("message")))
                    elif ast.unparse(node.func).split(".")[-1] in ("result", "check_result") and len(node.args) >= 6:
                        for c in _branches(node.args[5]):  # check id, severity, measured, expected, verdict, code
                            if _is_code(c):
                                add(_text(c), _verdict(node.args[4]), where,
                                    _text(node.args[6]) if len(node.args) > 6 else "")
                    _scan_sequence(list(node.args), where, add)
                elif isinstance(node, (ast.Tuple, ast.Return)):
                    value = node.value if isinstance(node, ast.Return) else node
                    if isinstance(value, ast.Tuple):
                        _scan_sequence(list(value.elts), where, add)
    return dict(sorted(found.items()))


def _is_code(node: ast.AST | None) -> bool:
    return bool(_CODE.match(_text(node)))


def _is_verdict(node: ast.AST | None) -> bool:
    return node is not None and ast.unparse(node).split(".")[-1] in VERDICT_WORDS


def _scan_sequence(items: list[ast.AST], where: str, add: Any) -> None:
    """A code next to a verdict in a call's arguments or a tuple (see scan_reason_codes)."""
    for i, item in enumerate(items):
        for code_node in _branches(item):
            if not _is_code(code_node):
                continue
            if i > 0 and _is_verdict(items[i - 1]):
                message = _text(items[i + 1]) if i + 1 < len(items) else ""
                add(_text(code_node), _verdict(items[i - 1]), where, message)
            elif i + 1 < len(items) and _is_verdict(items[i + 1]):
                add(_text(code_node), _verdict(items[i + 1]), where, "")


def _scan_assign(node: ast.Assign, where: str, add: Any) -> None:
    target = ast.unparse(node.targets[0])
    value = node.value
    if isinstance(node.targets[0], ast.Subscript) and ("quarantin" in target or "failures" in target):
        parts = value.elts if isinstance(value, ast.Tuple) else [value]
        code = _text(parts[0]) if parts else ""
        if code and re.fullmatch(r"[a-z][a-z0-9-]*", code) and (_CODE.match(code) or isinstance(value, ast.Tuple)):
            add(code, "quarantine", where, _text(parts[1]) if len(parts) > 1 else "")
    elif target in ("code", "reason_code"):
        for c in _branches(value):
            if _is_code(c):
                add(_text(c), "?", where, "")


def _branches(node: ast.AST | None) -> list[ast.AST]:
    """`a if c else b` gives both codes; anything else is itself."""
    if isinstance(node, ast.IfExp):
        return _branches(node.body) + _branches(node.orelse)
    return [node] if node is not None else []


ROLLOUT_DOES = {  # gpufleet.gates.verdict.decide: the verdict's action at admission
    "quarantine": "the node is quarantined and its slot gets a new instance from the spares "
                  "(`gpufleet rollout` prints `quarantined SLOT (INSTANCE): CODE -> replaced`)",
    "remediate": "action `retest`: the node is remediated (GPU reset, service restart or reboot) and gated "
                 "again; a second REMEDIATE quarantines it. Unreadable or missing tool output is a remediate, "
                 "never an admit",
    "warn": "kept in the admission record; the node is admitted",
}


def runbook() -> dict[str, str]:
    from gpufleet.daytwo import remediation

    reasons = scan_reason_codes()
    lines = ["# Reason codes: what each means and what to do", "",
             "Generated by `python -m gpufleet.docs_gen --update` from the gate checks' and the rollout's own source "
             "(`infra/gpufleet/gates`, `infra/gpufleet/rollout`) and the remediation ladder (`gpufleet.daytwo.remediation`); a test "
             "fails when it is stale. A quarantine prints its code (`gpufleet rollout`, `gpufleet pool`, "
             "the admission record's `reason_codes`). `<name>` stands for a part the check fills in "
             "(`version-<dashed>` is `version-nccl` for NCCL, `xid-<worst_x>` is `xid-79`).", "",
             "What the rollout does, by verdict:", ""]
    lines += [f"- **{v}**: {text}" for v, text in ROLLOUT_DOES.items()]
    lines += ["", "On day two (an alert, patrol or `gpufleet ops remediation run SLOT`) a node climbs its code's "
              "ladder: `reset-gpu`, `reboot`, `replace`, `quarantine` for service, each step but the last "
              "followed by the re-admission gate; `gpufleet ops remediation -s STACK` prints the table in force "
              "(a stack overrides rows with `gpufleet:ops.remediation`).", "",
              "| code | verdict | what it means (the check's message) | emitted by | day-two ladder |",
              "|---|---|---|---|---|"]
    for code, reason in reasons.items():
        ladder = remediation.BY_REASON.get(code, remediation.DEFAULT)
        for i, e in enumerate(reason.emits):
            message = (e.message or "").replace("|", "\\|").replace("\n", " ")
            verdict = "set by the check" if e.verdict == "?" else e.verdict
            lines.append(f"| `{code}` | {verdict} | {message} | `{e.where}` | "
                         + (" → ".join(ladder) if i == 0 else "") + " |")
    lines += ["", f"{len(reasons)} codes."]
    return {"reference/reason-codes.md": "\n".join(lines) + "\n"}


# --- JSON Schemas of the documents ------------------------------------------------------------------

def _envelope(kind: str, version: int | None = None) -> dict[str, Any]:
    return {
        "schema_version": {"type": "integer", **({"const": version} if version is not None else {})},
        "kind": {"const": kind},
        "stack": {"type": ["string", "null"]},
        "generated_at": {"type": "string", "format": "date-time"},
    }


def _doc(kind: str, version: int | None, body: dict[str, Any], required: list[str],
         title: str, extra: bool = False) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, "type": "object",
            "properties": {**_envelope(kind, version), **body},
            "required": [*_envelope(kind), *required], "additionalProperties": extra}


def _from_model(kind: str, model: type[BaseModel], title: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode="serialization")
    schema["properties"]["kind"] = {"const": kind}
    schema["properties"]["generated_at"] = {"type": "string", "format": "date-time"}
    schema["required"] = sorted(set(schema.get("required", [])) | {"schema_version", "kind", "stack", "generated_at"})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **schema}


def _changeset_schema() -> dict[str, Any]:
    """`--dry-run --json` of a command that buys, terminates, drains or deletes (gpufleet.changeset)."""
    from gpufleet.changeset import ACTIONS

    money = {"type": ["number", "null"]}
    return _doc("changeset", 1, {
        "command": {"type": "string"}, "simulated": {"type": "boolean"}, "empty": {"type": "boolean"},
        "summary": {"type": "array", "items": {
            "type": "object", "required": ["action", "kind", "count", "targets"], "additionalProperties": False,
            "properties": {"action": {"enum": list(ACTIONS)}, "kind": {"type": "string"},
                           "count": {"type": "integer", "minimum": 1}, "targets": {"type": "string"}}}},
        "changes": {"type": "array", "items": {
            "type": "object", "required": ["action", "kind", "target", "detail", "usd_per_hour"],
            "additionalProperties": False,
            "properties": {"action": {"enum": list(ACTIONS)}, "kind": {"type": "string"},
                           "target": {"type": "string"}, "detail": {"type": "string"}, "usd_per_hour": money}}},
        "usd_per_hour_delta": money, "price_note": {"type": "string"},
        "notes": {"type": "array", "items": {"type": "string"}}},
        ["command", "simulated", "empty", "summary", "changes", "usd_per_hour_delta", "price_note", "notes"],
        "gpufleet rollout|upgrade --dry-run --json (what the command would buy, terminate, drain or delete)")


def document_schemas() -> dict[str, str]:
    from gpufleet.cost.report import CostReport
    from gpufleet.daytwo.patrol_report import PatrolReport
    from gpufleet.daytwo.upgrade_report import UpgradeReport
    from gpufleet.findings import Finding
    from gpufleet.plan.model import ClusterPlan
    from gpufleet.reports.audit import AuditReport
    from gpufleet.reports.drift import DriftReport
    from gpufleet.reports.rollout_model import RolloutReport

    from gpufleet.gates.admission import AdmissionRecord

    finding = Finding.model_json_schema(mode="serialization")
    record = AdmissionRecord.model_json_schema(mode="serialization")
    plan = ClusterPlan.model_json_schema(mode="serialization")
    plan_body = {k: v for k, v in plan["properties"].items() if k != "schema_version"}
    counts = {"type": "object", "additionalProperties": {"type": "integer"}}
    node = {"type": "object", "required": ["slot", "reason_code"],
            "properties": {"slot": {"type": "string"}, "block": {"type": ["integer", "null"]},
                           "partition": {"type": ["string", "null"]}, "reason_code": {"type": ["string", "null"]},
                           "reason": {"type": ["string", "null"]}, "failures": {"type": "integer"}}}
    schemas: dict[str, dict[str, Any]] = {
        "validate": _doc("validate", 2, {
            "errors": {"type": "array", "items": {"type": "object", "required": ["file", "field", "message"],
                                                  "properties": {"file": {"type": ["string", "null"]},
                                                                 "line": {"type": ["integer", "null"]},
                                                                 "field": {"type": ["string", "null"]},
                                                                 "message": {"type": "string"},
                                                                 "expected": {"type": ["string", "null"]}},
                                                  "additionalProperties": False}},
            "findings": {"type": "array", "items": {"$ref": "#/$defs/Finding"}}},
            ["errors", "findings"], "gpufleet validate --json"),
        "plan": {**_doc("plan", 2, plan_body, [k for k in plan.get("required", []) if k != "schema_version"],
                        "gpufleet plan --json (gpufleet.plan.model.ClusterPlan in the envelope)"),
                 "$defs": plan.get("$defs", {})},
        "pool": _doc("pool", 2, {
            "pool": {"type": "string"}, "planned_nodes": {"type": "integer"}, "counts": counts,
            "partitions": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["units", "free_units", "nodes"],
                "properties": {"units": {"type": ["integer", "null"]}, "free_units": {"type": "integer"},
                               "nodes": counts}}},
            "blocks": {"type": "object", "additionalProperties": counts},
            "quarantined": {"type": "array", "items": node}, "blacklisted": {"type": "array", "items": node},
            "breaker": {"type": "object"}},
            ["pool", "planned_nodes", "counts", "partitions", "blocks", "quarantined", "blacklisted"],
            "gpufleet pool --json", extra=False),
        "preview": _doc("preview", 2, {
            "cluster": {"type": "string"}, "pool": {"type": "string"}, "batches": {"type": "integer"},
            "deployed_batches": {"type": ["integer", "null"]}, "resources": {"type": "integer"},
            "by_type": {"type": "object", "additionalProperties": {"type": "integer"}},
            "instances_by_batch": {"type": "object", "additionalProperties": {"type": "integer"}},
            "interfaces": {"type": "object", "additionalProperties": {"type": "array", "items": {
                "type": "object", "required": ["card", "device", "type", "security_groups"],
                "additionalProperties": False,
                "properties": {"card": {"type": "integer"}, "device": {"type": "integer"}, "type": {"type": "string"},
                               "security_groups": {"type": "integer"}}}}},
            "storage": {"type": "object", "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"}},
            "policies": {"type": "array", "items": {"type": "object", "required": ["policy", "level", "message"]}},
            "mandatory_violations": {"type": "integer"}},
            ["cluster", "pool", "batches", "resources", "by_type", "policies", "mandatory_violations"],
            "gpufleet preview --offline --json"),
        "image": _doc("image", 1, {"argv": {"type": "array", "items": {"type": "string"}, "minItems": 3},
                                   "bom_digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}},
                      ["argv", "bom_digest"], "gpufleet image --json"),
        "history": _doc("history", 1, {"since": {"type": ["string", "null"]},
                                       "records": {"type": "array", "items": {
                                           "type": "object", "required": ["at", "who", "what", "why", "stack"]}}},
                        ["since", "records"], "gpufleet history --json"),
        "gate": {**_doc("gate", 1, {"directory": {"type": "string"},
                                    "records": {"type": "array", "items": {"$ref": "#/$defs/AdmissionRecord"}}},
                        ["directory", "records"], "gpufleet gate --json (one admission record per node)"),
                 "$defs": {"AdmissionRecord": {k: v for k, v in record.items() if k != "$defs"}, **record.get("$defs", {})}},
        "doctor": _doc("doctor", 1, {
            "host": {"type": "string"}, "bom": {"type": "string"}, "ok": {"type": "boolean"},
            "differences": {"type": "array", "items": {
                "type": "object", "required": ["check", "expected", "found", "source"], "additionalProperties": False,
                "properties": {k: {"type": "string"} for k in ("check", "expected", "found", "source")}}},
            "notes": {"type": "array", "items": {  # paths doctor could not test: never counted as passed
                "type": "object", "required": ["check", "detail", "source"], "additionalProperties": False,
                "properties": {k: {"type": "string"} for k in ("check", "detail", "source")}}}},
            ["host", "bom", "ok", "differences", "notes"], "gpufleet doctor --json (what differs on one node, "
                                                            "and what it could not check)"),
        "remediation": _doc("remediation", 1, {"rows": {"type": "array", "items": {
            "type": "object", "required": ["code", "steps", "source"], "additionalProperties": False,
            "properties": {"code": {"type": "string"}, "steps": {"type": "array", "items": {
                "enum": ["reset-gpu", "reboot", "replace", "quarantine"]}}, "source": {"type": "string"}}}}},
            ["rows"], "gpufleet ops remediation --json"),
        "changeset": _changeset_schema(),
        "destroy": _doc("destroy", 1, {
            "destroyed": {"type": "boolean"}, "why": {"type": "string"},
            "steps": {"type": "array", "items": {"type": "object", "required": ["id"], "properties": {
                "id": {"type": "string"}}}},
            "terminated": {"type": "integer", "minimum": 0}, "drained": {"type": "integer", "minimum": 0},
            "saved": {"type": "array", "items": {"type": "string"}}, "journal": {"type": "string"}},
            ["destroyed", "steps"], "gpufleet destroy --json (each step's result; or nothing to destroy)"),
        "rollout": _from_model("rollout", RolloutReport, "gpufleet rollout --json and reports/<stack>/rollout.json"),
        "upgrade": _from_model("upgrade", UpgradeReport, "gpufleet upgrade --json and reports/<stack>/upgrade.json"),
        "cost": _from_model("cost", CostReport, "gpufleet cost --json and reports/<stack>/cost.json"),
        "patrol": _from_model("patrol", PatrolReport, "gpufleet patrol --json and reports/<stack>/patrol.json"),
        "audit": _from_model("audit", AuditReport, "gpufleet audit --json and reports/<stack>/audit.json"),
        "drift": _from_model("drift", DriftReport, "gpufleet drift --json and reports/<stack>/drift.json"),
    }
    finding_defs = finding.pop("$defs", {})  # one $defs at the root: nested ones do not resolve from #/$defs
    schemas["validate"]["$defs"] = {"Finding": finding, **finding_defs}
    return {f"schemas/{kind}.schema.json": json.dumps(s, indent=2, sort_keys=True) + "\n"
            for kind, s in sorted(schemas.items())}


# --- all of it --------------------------------------------------------------------------------------

def generated() -> dict[str, str]:
    """docs/-relative path -> text, for every generated file."""
    return {**configuration_reference(), **runbook(), **document_schemas()}


def stale(docs: Path) -> list[str]:
    return [rel for rel, text in generated().items()
            if not (docs / rel).is_file() or (docs / rel).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=DOCS, help="the docs folder (default: ./docs)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--update", action="store_true", help="rewrite the generated files")
    mode.add_argument("--check", action="store_true", help="exit 1 naming each stale file")
    args = parser.parse_args(argv)
    if args.update:
        for rel, text in generated().items():
            (args.docs / rel).parent.mkdir(parents=True, exist_ok=True)
            (args.docs / rel).write_text(text, encoding="utf-8")
        return 0
    bad = stale(args.docs)
    for rel in bad:
        print(f"stale: {args.docs / rel} (python -m gpufleet.docs_gen --update)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
