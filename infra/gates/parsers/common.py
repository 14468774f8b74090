"""Small helpers shared by the parsers: sentinels, numbers with units, rank prefixes."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

# nvidia-smi prints these instead of a value; they mean "no reading", not a failure ...
NA_SENTINELS = frozenset({
    "", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Requested functionality has been deprecated]",
    "Requested functionality has been deprecated", "[Insufficient Permissions]", "[Not Found]",
})
# ... while these mean the GPU or driver is in trouble.
ERROR_SENTINELS = frozenset({"[GPU is lost]", "[Unknown Error]", "[Unknown]", "GPU is lost", "Unknown Error"})

_NUM_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(?:[A-Za-z%/]+(?:\([a-z]+\))?)$")
RANK_PREFIX = re.compile(r"^(?:\s*\d+:\s?|\[\d+,\d+\]<std(?:out|err)>:)")


class ParseModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def strip_unit(value: str) -> str:
    """'81559 MiB' -> '81559'; '700.00 W' -> '700.00'; other text unchanged."""
    m = _NUM_UNIT.match(value)
    return m.group(1) if m else value


def to_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(strip_unit(value.strip()))
    except ValueError:
        return None


def to_int(value: str | None) -> int | None:
    if value is None:
        return None
    v = strip_unit(value.strip())
    try:
        return int(v, 16) if v.lower().startswith("0x") else int(v)
    except ValueError:
        f = to_float(v)
        return int(f) if f is not None and f.is_integer() else None


def yes_no(value: str | None) -> bool | None:
    """'Yes'/'No', 'Enabled'/'Disabled', 'Active'/'Not Active' -> bool; anything else -> None."""
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("yes", "enabled", "active", "true"):
        return True
    if v in ("no", "disabled", "not active", "false", "none"):
        return False
    return None


def strip_rank_prefix(line: str) -> str:
    """Remove `0: ` (srun -l) or `[1,0]<stdout>:` (OpenMPI --tag-output)."""
    return RANK_PREFIX.sub("", line, count=1)
