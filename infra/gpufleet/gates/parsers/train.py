"""The training smoke job's one JSON result line (images/workloads/train_smoke.py).

Why a marker key: the job's output also holds the launcher's lines (srun `-l` rank prefixes,
torch warnings); the result is the one JSON object carrying `"gpufleet_smoke"`, printed by
rank 0 after every rank has checked the others' parameters.
"""

from __future__ import annotations

import json

from gpufleet.gates.parsers.common import RANK_PREFIX, ParseModel

MARKER = "gpufleet_smoke"


class SmokeResult(ParseModel):
    world_size: int
    backend: str
    steps: int
    loss: tuple[float, ...]
    samples_per_second: float
    allreduce_ms: tuple[float, ...]
    data_loading_share: float
    ranks_agree: bool
    checksums: tuple[float, ...] = ()
    hosts: tuple[str, ...] = ()


class SmokeOutput(ParseModel):
    result: SmokeResult | None = None
    problems: tuple[str, ...] = ()


def parse_output(text: str) -> SmokeOutput:
    found: list[dict] = []
    for raw in text.splitlines():
        line = RANK_PREFIX.sub("", raw).strip()
        if not (line.startswith("{") and MARKER in line):
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and doc.get(MARKER) == 1:
            found.append(doc)
    if not found:
        tail = text.strip().splitlines()[-3:]
        return SmokeOutput(problems=(f"no smoke result line; output ends with: {' | '.join(tail)[:300]!r}",))
    if len(found) > 1:
        return SmokeOutput(problems=(f"{len(found)} smoke result lines (one expected: rank 0 prints it)",))
    doc = {k: v for k, v in found[0].items() if k != MARKER}
    try:
        return SmokeOutput(result=SmokeResult.model_validate(doc))
    except ValueError as exc:
        return SmokeOutput(problems=(f"malformed smoke result: {str(exc).splitlines()[0]}",))
