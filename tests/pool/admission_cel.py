"""A ValidatingAdmissionPolicy evaluated with cel-python the way the API server evaluates it on a
request: its variables in order, then every validation; a false one denies with its message or
messageExpression. `object` is the request's object, `namespaceObject` its namespace.

The one function outside cel-python's built-ins that gpufleet's policies use is `sum()` from the
Kubernetes CEL list library (CEL has no fold); `k8s_sum` binds it with the library's meaning (sum
of a list of ints, 0 when empty).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import celpy
from celpy import celtypes


def k8s_sum(values: celtypes.ListType) -> celtypes.IntType:
    total = celtypes.IntType(0)
    for v in values:
        total = total + v
    return total


@lru_cache(maxsize=None)
def program(expression: str):
    env = celpy.Environment()
    return env.program(env.compile(expression), functions={"sum": k8s_sum})


def admit(policy: Mapping[str, Any], obj: Mapping[str, Any], namespace: Mapping[str, Any] | None = None) -> list[str]:
    """The API server's answer to the request: the messages of the failed validations ([]: admitted).
    An evaluation error raises (with failurePolicy Fail the server would deny it without a useful message)."""
    variables: dict[celtypes.StringType, Any] = {}
    activation: dict[str, Any] = {"object": celpy.json_to_cel(dict(obj))}
    if namespace is not None:
        activation["namespaceObject"] = celpy.json_to_cel(dict(namespace))
    for var in policy["spec"].get("variables", []):
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(var["name"])] = program(var["expression"]).evaluate(activation)
    activation["variables"] = celtypes.MapType(variables)
    denied = []
    for rule in policy["spec"]["validations"]:
        verdict = program(rule["expression"]).evaluate(activation)
        assert isinstance(verdict, celtypes.BoolType), (rule["expression"], verdict)
        if not verdict:
            if "messageExpression" in rule:
                denied.append(str(program(rule["messageExpression"]).evaluate(activation)))
            else:
                denied.append(rule["message"])
    return denied
