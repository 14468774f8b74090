"""How a pool node is written in Slurm, and read back: pure parsing and encoding.

A slot's gpufleet state lives in Slurm itself, so an operator's `sinfo -R` / `scontrol show node`
tells the same story as `gpufleet pool`, and nothing beside Slurm can drift from it:
- state and reason: DRAIN with the reason "gpufleet: pending gates", "gpufleet quarantine
  <code>: <text>", "gpufleet blacklist <code>: <text>" or "gpufleet: released"; admitted = not
  drained (RESUMEd).
- the node comment: `gpufleet f=<failures> [d=<record digest>] [| <record summary>]`. The
  failure count sits here, not in a state file beside Slurm, because it must follow the slot
  wherever Slurm's state goes (slurmctld's StateSaveLocation survives controller restarts and
  fail-over; a file on the machine that ran the rollout would not, and could disagree with
  Slurm after an operator's change).
- block and partition come from the configuration gpufleet generated (the node's feature
  `blockNNNN` and its partitions), so they need no writing.
A DRAIN or DOWN set by someone else (Slurm's own "Kill task failed", an operator) reads as
QUARANTINED with code `slurm-drain` / `slurm-down`: the node takes no work, and gpufleet says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpufleet.errors import PoolError
from gpufleet.pool.protocol import PENDING_REASON, NodeState, PoolNode

COMMENT_TAG = "gpufleet"
RELEASED_REASON = "gpufleet: released"
_QUARANTINE = "gpufleet quarantine "
_BLACKLIST = "gpufleet blacklist "
_BLOCK_FEATURE = re.compile(r"^block(\d+)$")
# gpufleet's own hidden partition over every node, for its gate runs (pairs and the smoke job may
# span the plan's partitions; one Slurm job runs in one partition). Not a pool partition: dropped
# from what a node is read to belong to. job_submit.lua lets only gate-reservation jobs into it.
GATES_PARTITION = "gpufleet-gates"


@dataclass(frozen=True)
class SlurmNode:
    """What Slurm says about one node, whichever command it came from."""

    name: str
    drained: bool  # DRAIN flag (drained or draining)
    down: bool
    busy: bool  # allocated or mixed
    reason: str
    comment: str
    partitions: tuple[str, ...]
    features: tuple[str, ...]
    responding: bool = True

    @property
    def block(self) -> int | None:
        for f in self.features:
            m = _BLOCK_FEATURE.match(f)
            if m:
                return int(m.group(1))
        return None


# --- parsing ---------------------------------------------------------------------------------

def parse_json(text: str) -> dict[str, SlurmNode]:
    """`sinfo --json` (openapi v0.0.37/38: state a string, flags apart) or `scontrol show node
    --json` (23.02 and later: state a list holding the flags)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PoolError(f"Slurm printed JSON that does not parse ({exc.msg} at line {exc.lineno})") from None
    if isinstance(doc, dict) and isinstance(doc.get("sinfo"), list):
        return _parse_grouped(doc["sinfo"])
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        raise PoolError("Slurm's JSON has neither a `nodes` nor a `sinfo` list (not sinfo/scontrol --json output)")
    out: dict[str, SlurmNode] = {}
    for raw in nodes:
        state = raw.get("state")
        words = [s.upper() for s in (state if isinstance(state, list) else [state or ""])]
        words += [s.upper() for s in raw.get("state_flags") or []]
        features = raw.get("features") or ""
        features = features if isinstance(features, list) else [f for f in str(features).split(",") if f]
        out[raw["name"]] = _node(raw["name"], words, raw.get("reason") or "", raw.get("comment") or "",
                                 raw.get("partitions") or [], features)
    return out


def _parse_grouped(groups: list) -> dict[str, SlurmNode]:
    """`sinfo -N --json` from 23.02 (data_parser v0.0.39+): entries group nodes per partition,
    state a list, reason an object; a node in two partitions appears twice."""
    out: dict[str, SlurmNode] = {}
    for g in groups:
        reason = g.get("reason") or ""
        reason = reason.get("description", "") if isinstance(reason, dict) else str(reason)
        feats = g.get("features") or {}
        feats = feats.get("total", "") if isinstance(feats, dict) else str(feats)
        part = (g.get("partition") or {}).get("name") or ""
        state = (g.get("node") or {}).get("state") or []
        for name in (g.get("nodes") or {}).get("nodes") or []:
            prev = out.get(name)
            parts = (*(prev.partitions if prev else ()), *([part] if part else []))
            out[name] = _node(name, [state] if isinstance(state, str) else list(state), reason, g.get("comment") or "",
                              list(parts), [f for f in feats.split(",") if f])
    return out


def parse_text(text: str) -> dict[str, SlurmNode]:
    """`scontrol -o show node [...]`: one line per node. Comment and Reason may hold spaces, so
    they are cut at the known keys that follow them rather than split on blanks."""
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        name = line.split()[0].split("=", 1)[1]
        fields = dict(m.groups() for m in re.finditer(r"(?:^| )(State|Partitions|AvailableFeatures)=(\S*)", line))
        reason = _between(line, "Reason=", (" Comment=",))
        reason = re.sub(r" \[[^\]]*\]$", "", reason)  # Slurm appends [user@time]
        comment = _between(line, "Comment=", (" Reason=",))
        words = fields.get("State", "").upper().split("+")
        avail = fields.get("AvailableFeatures", "(null)")
        features = [] if avail in ("", "(null)") else avail.split(",")
        partitions = [p for p in fields.get("Partitions", "").split(",") if p]
        out[name] = _node(name, words, reason, comment, partitions, features)
    return out


def _between(line: str, key: str, stops: tuple[str, ...]) -> str:
    i = line.find(" " + key)
    if i < 0:
        return ""
    rest = line[i + 1 + len(key):]
    end = min((rest.find(s) for s in stops if rest.find(s) >= 0), default=len(rest))
    return rest[:end].strip()


def _node(name: str, words: list[str], reason: str, comment: str, partitions: list[str], features: list[str]) -> SlurmNode:
    flags = set(w.rstrip("*") for w in words)
    partitions = [p for p in partitions if p != GATES_PARTITION]
    return SlurmNode(name=name, drained=bool(flags & {"DRAIN", "DRAINED", "DRAINING"}),
                     down=bool(flags & {"DOWN", "FAIL"}), busy=bool(flags & {"ALLOCATED", "MIXED", "COMPLETING"}),
                     reason=reason.strip(), comment=_unquote(comment.strip()), partitions=tuple(partitions),
                     features=tuple(features), responding="NOT_RESPONDING" not in flags and not any(w.endswith("*") for w in words))


def _unquote(text: str) -> str:
    """scontrol keeps the quotes of a Comment given on its stdin: read both forms the same."""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


# --- the comment -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Comment:
    failures: int = 0
    digest: str | None = None
    summary: str = ""

    def render(self) -> str:
        head = f"{COMMENT_TAG} f={self.failures}" + (f" d={self.digest}" if self.digest else "")
        return f"{head} | {self.summary}" if self.summary else head


def parse_comment(text: str) -> Comment | None:
    """The gpufleet comment, or None when the node carries someone else's (or none)."""
    head, _, summary = text.partition(" | ")
    words = head.split()
    if not words or words[0] != COMMENT_TAG:
        return None
    kv = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    try:
        failures = int(kv.get("f", "0"))
    except ValueError:
        failures = 0
    return Comment(failures=failures, digest=kv.get("d"), summary=summary.strip())


# --- the mapping -----------------------------------------------------------------------------

def pool_node(n: SlurmNode) -> PoolNode | None:
    """The pool's view of a Slurm node; None for a released slot (or one gpufleet never touched
    that is taking work: not this pool's to report)."""
    c = parse_comment(n.comment) or Comment()
    partition = n.partitions[0] if n.partitions else None
    base = dict(slot=n.name, block=n.block, partition=partition, failures=c.failures, busy=n.busy)
    if n.drained or n.down:
        if n.reason == PENDING_REASON:
            return PoolNode(state=NodeState.PENDING, **base)
        if n.reason == RELEASED_REASON:
            return None
        for prefix, state in ((_QUARANTINE, NodeState.QUARANTINED), (_BLACKLIST, NodeState.BLACKLISTED)):
            if n.reason.startswith(prefix):
                code, _, text = n.reason[len(prefix):].partition(": ")
                return PoolNode(state=state, reason_code=code, reason=text, **base)
        code = "slurm-down" if n.down else "slurm-drain"
        return PoolNode(state=NodeState.QUARANTINED, reason_code=code, reason=n.reason or code, **base)
    if c.digest:
        return PoolNode(state=NodeState.ADMITTED, record_digest=c.digest, **base)
    if parse_comment(n.comment) is not None:  # resumed only for a gate run (reserved): still pending
        return PoolNode(state=NodeState.PENDING, **base)
    return None


def released_failures(n: SlurmNode) -> int | None:
    """The remembered failures of a released slot; None when the node is not released."""
    if (n.drained or n.down) and n.reason == RELEASED_REASON:
        c = parse_comment(n.comment)
        return c.failures if c else 0
    return None


def reason_for(node: PoolNode) -> str | None:
    """The DRAIN reason that writes this state (None: not drained)."""
    if node.state is NodeState.PENDING:
        return PENDING_REASON
    if node.state is NodeState.QUARANTINED:
        return f"{_QUARANTINE}{node.reason_code}: {node.reason or ''}".rstrip(": ")
    if node.state is NodeState.BLACKLISTED:
        return f"{_BLACKLIST}{node.reason_code}: {node.reason or ''}".rstrip(": ")
    return None
