"""One envelope for every JSON document gpufleet prints or writes (issue 23 item 8).

Every `--json` output and every JSON report starts with the same four keys, so a pipeline reads
any of them the same way: `schema_version` (an integer, raised when a field changes meaning or
goes away), `kind` (which document this is: `validate`, `plan`, `rollout` ...), `stack` and
`generated_at` (UTC, ISO 8601). Keys are snake_case throughout; names that are data (slots,
partitions, resource types, versions) may be anything. Each kind has a JSON Schema under
`docs/schemas/<kind>.schema.json` that the tests hold the commands' output to.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping

HEADER = ("schema_version", "kind", "stack", "generated_at")
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
CAMEL = re.compile(r"[a-z0-9][A-Z]")


def now() -> str:
    """The envelope's `generated_at`: UTC to the second, with a Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def envelope(kind: str, stack: str | None, body: Mapping[str, Any], *, schema_version: int,
             generated_at: str | None = None) -> dict[str, Any]:
    """The four header keys, then `body` (which must not carry them itself)."""
    clash = sorted(set(HEADER) & set(body))
    if clash:
        raise ValueError(f"the body of a {kind} document carries envelope keys: {', '.join(clash)}")
    return {"schema_version": schema_version, "kind": kind, "stack": stack,
            "generated_at": generated_at or now(), **body}


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str)


def camel_keys(doc: Any, path: str = "$") -> Iterator[str]:
    """Paths of keys written in camelCase (`deployedBatches`): the style the envelope forbids.
    A key that is data (`local-b0000-n00000`, `aws:ec2/instance:Instance`) is not a field name and
    passes; so does any key under a field the caller names as a map of data."""
    if isinstance(doc, Mapping):
        for key, value in doc.items():
            if isinstance(key, str) and CAMEL.search(key) and ":" not in key and "/" not in key:
                yield f"{path}.{key}"
            yield from camel_keys(value, f"{path}.{key}")
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from camel_keys(item, f"{path}[{i}]")
