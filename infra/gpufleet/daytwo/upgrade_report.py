"""An upgrade as a report: groups, their durations and baselines before and after (shared renderers)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import gpufleet
from gpufleet.daytwo.upgrade_run import Outcome
from gpufleet.reports.document import Document, Paragraph, Section, Status, SummaryItem, Table, Tone
from gpufleet.reports.write import write_report

SCHEMA_VERSION = 1


class GroupReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    number: int
    blocks: list[int]
    nodes: int
    stage: str
    result: str | None
    rolled_back: bool
    seconds: float
    before: dict[str, Any]
    after: dict[str, Any]
    reason: str
    reimaged: int = 0  # nodes whose instance was replaced from the target image (on the way up)


class UpgradeReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: Literal["upgrade"] = "upgrade"  # the envelope every JSON document starts with (gpufleet.envelope)
    stack: str
    generated_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    target_digest: str | None
    method: str = "inplace"
    target_ami: str | None = None
    stage: str
    message: str
    halted: bool
    groups: list[GroupReport]
    gpufleet_version: str = gpufleet.__version__


def build(stack: str, out: Outcome) -> UpgradeReport:
    up = out.state
    groups = [] if up is None else [
        GroupReport(number=g.number, blocks=g.blocks, nodes=len(g.slots), stage=g.stage, result=g.result,
                    rolled_back=g.rolled_back, seconds=round(g.seconds, 1), before=g.before, after=g.after,
                    reason=g.reason, reimaged=len(g.reimages.get(f"upgrade:{up.target_ami}", {}).get("instances", {})))
        for _n, g in sorted(up.groups.items())]
    return UpgradeReport(stack=stack, target_digest=up.target_digest if up else None, stage=up.stage if up else "none",
                         method=up.method if up else "inplace", target_ami=up.target_ami if up else None,
                         message=out.message, halted=out.halted, groups=groups)


def document(r: UpgradeReport) -> Document:
    summary = [SummaryItem(key="target BOM", value=f"`{(r.target_digest or '-')[:19]}`"),
               SummaryItem(key="method", value=r.method + (f" from `{r.target_ami}`" if r.target_ami else "")),
               SummaryItem(key="state", value=r.stage, tone=Tone.BAD if r.halted else Tone.GOOD),
               SummaryItem(key="groups", value=f"{sum(g.stage == 'admitted' for g in r.groups)} of {len(r.groups)} "
                                               "upgraded")]
    rows = [[g.number, ", ".join(map(str, g.blocks)) or "-", g.nodes, g.reimaged, g.stage, g.result or "-", g.seconds,
             g.before.get("intra_node_gbs"), g.after.get("intra_node_gbs"), g.before.get("multi_node_gbs"),
             g.after.get("multi_node_gbs")] for g in r.groups]
    table = Table(title="Groups", columns=["group", "blocks", "nodes", "reimaged", "stage", "gates", "seconds",
                                           "intra before",
                                           "intra after", "multi before", "multi after"], rows=rows,
                  caption="busbw medians in GB/s; seconds are modelled on the simulator, measured otherwise")
    blocks: list = [Paragraph(text=r.message, tone=Tone.BAD if r.halted else Tone.INFO), table]
    return Document(kind="upgrade", title=f"Upgrade of {r.stack}", stack=r.stack,
                    generated_at=datetime.now(timezone.utc), status=Status.FAILED if r.halted else Status.OK,
                    summary=summary, sections=[Section(title="Groups", blocks=blocks)])


def write(d: Any, out: Outcome, directory: Path) -> dict[str, Path]:
    r = build(d.stack, out)
    return write_report(document(r), r, directory, "upgrade")


def render_text(out: Outcome) -> str:
    lines = [f"upgrade: {out.message}"]
    if out.state is not None:
        if out.state.target_ami:
            lines.append(f"  by reimage from {out.state.target_ami} (nodes on another image), in place otherwise")
        for _n, g in sorted(out.state.groups.items()):
            reimaged = len(g.reimaged_slots())
            lines.append(f"  group {g.number}: {len(g.slots)} node(s), {g.stage}"
                         + (f", {reimaged} reimaged" if reimaged else "")
                         + (f" ({g.result})" if g.result else "") + (f": {g.reason}" if g.reason else ""))
    return "\n".join(lines)
