"""What a written record may show: secrets masked, control characters escaped.

Why one function for every writer (the rollout journal, the day-two log, the pool state, the audit
log, reports): a secret reaches a record through many doors (an alert's annotations, a `--reason`,
an exception's text quoting an environment variable) and one rule applied at every door is the
only one that can be checked. Masked: values under secret-like keys (`password`, `api_token`,
`secretAccessKey`...), the values of the environment's secret-like variables, and values a
process registers (`register`: the webhook token, the audit key) wherever they appear in a string.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Mapping

MASK = "[redacted]"
SECRET_KEY = re.compile(r"secret|token|passw|credential|private.?key|access.?key|session|api.?key|authori[sz]", re.I)
MIN_SECRET = 8  # shorter values are not masked inside strings (they would mask ordinary words)
PRIVATE_MODE = 0o600  # what every record file is created with
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x80-\x9f\u2028\u2029]")
_registered: set[str] = set()
_lock = threading.Lock()


def register(secret: str) -> None:
    """Mask this value in every record this process writes from now on (a token it read)."""
    if len(secret) >= MIN_SECRET:
        with _lock:
            _registered.add(secret)


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of the environment's secret-like variables and registered secrets, longest first."""
    env = os.environ if env is None else env
    found = {v for k, v in env.items() if SECRET_KEY.search(k) and len(v) >= MIN_SECRET}
    with _lock:
        found |= _registered
    return sorted(found, key=len, reverse=True)


def mask(value: Any, secrets: list[str] | None = None) -> Any:
    """`value` with every secret replaced by MASK (mappings, lists and strings, recursively; pure
    given `secrets`, which defaults to `secret_values()`)."""
    return _mask(value, secret_values() if secrets is None else secrets)


def _mask(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, Mapping):
        return {str(k): MASK if SECRET_KEY.search(str(k)) and _maskable(v) else _mask(v, secrets)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(v, secrets) for v in value]
    if isinstance(value, str):
        for s in secrets:
            value = value.replace(s, MASK)
        return value
    return value


def _maskable(v: Any) -> bool:
    """A secret-like key holding something (an empty value or a flag shows that there is none)."""
    return v is not None and not isinstance(v, bool) and v != ""


def escape_controls(text: str) -> str:
    """Control characters as visible escapes (`\\n` -> `\\x0a`): one log line stays one line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}",
                        text)
