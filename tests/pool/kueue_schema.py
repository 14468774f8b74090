"""Kueue objects checked as the API server checks them on create: the v0.19.2 CRD schemas copied into
tests/fixtures/schemas (strictly: a field the schema does not declare fails, as the API server would
silently prune it) and the CRDs' CEL rules (`x-kubernetes-validations`, evaluated with cel-python;
transition rules that read `oldSelf` only apply to updates and are skipped)."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas" / "kueue-v0.19.2"
KUEUE_GROUP = "kueue.x-k8s.io"


@lru_cache(maxsize=None)
def crd_schema(kind: str, version: str) -> dict[str, Any]:
    for path in SCHEMAS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            served = {ver["name"]: ver for ver in crd["spec"]["versions"] if ver["served"]}
            assert version in served, f"{kind} {version} is not served by Kueue v0.19.2 (served: {sorted(served)})"
            return strict(served[version]["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no CRD for {kind} in {SCHEMAS}")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields refused wherever it lists properties (the API server prunes them)."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(out)
    return out


class CelViolation(AssertionError):
    pass


@lru_cache(maxsize=None)
def cel_program(rule: str):
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_violations(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Every CEL rule of the schema, evaluated where the object has a value, as the API server does on create."""
    out = []
    for check in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in check["rule"]:
            continue
        result = cel_program(check["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            out.append(f"{path or '<root>'}: {check.get('message', check['rule'])}")
    if isinstance(value, dict):
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            sub_schema = schema.get("properties", {}).get(key, extra if isinstance(extra, dict) else None)
            if sub_schema is not None:
                out += cel_violations(sub_schema, sub, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, sub in enumerate(value):
            out += cel_violations(schema["items"], sub, f"{path}[{i}]")
    return out


def validate_kueue(obj: dict[str, Any]) -> None:
    group, version = obj["apiVersion"].split("/")
    assert group == KUEUE_GROUP
    schema = crd_schema(obj["kind"], version)
    jsonschema.Draft7Validator(schema).validate(obj)
    violations = cel_violations(schema, obj)
    if violations:
        raise CelViolation("; ".join(violations))


