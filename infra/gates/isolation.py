"""Multi-node fault isolation: pairs in parallel, attribution with known-good partners, one ring,
bisection when the ring underperforms.

Why this shape (research section d item 4; Google CHS two-pass): a failing pair says only
"one of us, or the link between us". Each suspect is re-paired with known-good nodes and is
quarantined only after failing with `min_good_failures` different good partners; a pair whose
two nodes both pass elsewhere is a link fault, reported and escalated, quarantining nobody.
Pairs miss faults that only show at scale, so a ring over the batch (and into already-admitted
nodes) follows; an underperforming ring is bisected down to nodes that are then tested in small
rings with known-good companions. Every step is a *round* of disjoint groups run in parallel;
the caller's `run_round` executes a round (see launch.py) and returns busbw per group.
"""

from __future__ import annotations

from typing import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

Group = tuple[str, ...]
RunRound = Callable[[Sequence[Group]], Sequence[float]]


class IsolationResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    good: tuple[str, ...] = ()  # batch nodes cleared for admission by the network gates
    quarantined: dict[str, str] = Field(default_factory=dict)  # node -> reason code
    link_faults: tuple[tuple[str, str], ...] = ()  # pairs failing while both nodes pass elsewhere
    ring_faults: tuple[Group, ...] = ()  # groups that underperform with no node to blame
    unresolved: tuple[str, ...] = ()  # suspects with no known-good partner left to test against
    rounds: tuple[tuple[Group, ...], ...] = ()  # the schedule that was run, round by round
    busbw: dict[str, float] = Field(default_factory=dict)  # "a+b+c" -> busbw
    floor: float | None = None  # the pair gate this run used (GB/s)
    ring_floor: float | None = None  # the ring gate this run used (GB/s)

    @property
    def runs(self) -> int:
        return sum(len(r) for r in self.rounds)

    @property
    def escalations(self) -> tuple[Group, ...]:
        return tuple(self.link_faults) + tuple(self.ring_faults)


class NodeIsolation(BaseModel):
    """One batch node's share of an isolation run: its figures and the network gate's verdict.

    Why per node: the admission record is per node (admission.with_multinode folds this in);
    link and ring faults stay batch-level (`IsolationResult.escalations`), quarantining nobody.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    pair_gbs: dict[str, float] = Field(default_factory=dict)  # partner -> busbw of the last pair run with it
    ring_gbs: dict[str, float] = Field(default_factory=dict)  # "ring:r<round>:<n>nodes" -> busbw (groups of >= 3)
    outcome: str  # "admitted", "quarantined", "unresolved"
    reason_code: str | None = None  # the quarantine code (efa-pair-fail, ring-underperform) or multinode-unresolved
    floor: float | None = None
    ring_floor: float | None = None


def node_isolation(result: IsolationResult, node: str) -> NodeIsolation:
    """The node's figures from the schedule that ran (`rounds` + `busbw`) and its outcome.

    Raises KeyError for a node that was not in the batch (nothing to fold in)."""
    if node in result.quarantined:
        outcome, code = "quarantined", result.quarantined[node]
    elif node in result.unresolved:
        outcome, code = "unresolved", "multinode-unresolved"
    elif node in result.good:
        outcome, code = "admitted", None
    else:
        raise KeyError(f"{node} was not in this isolation batch")
    pairs: dict[str, float] = {}
    rings: dict[str, float] = {}
    for i, groups in enumerate(result.rounds, start=1):
        for g in groups:
            if node not in g:
                continue
            v = result.busbw.get("+".join(g))
            if v is None:
                continue
            if len(g) == 2:
                pairs[g[1] if g[0] == node else g[0]] = v
            else:
                rings[f"ring:r{i}:{len(g)}nodes"] = v
            break  # groups of one round are disjoint
    return NodeIsolation(node=node, pair_gbs=pairs, ring_gbs=rings, outcome=outcome, reason_code=code,
                         floor=result.floor, ring_floor=result.ring_floor)


class _Runner:
    def __init__(self, run_round: RunRound, floor: float) -> None:
        self.run_round, self.floor = run_round, floor
        self.rounds: list[tuple[Group, ...]] = []
        self.busbw: dict[str, float] = {}

    def __call__(self, groups: Sequence[Group]) -> list[bool]:
        flat = [n for g in groups for n in g]
        if len(flat) != len(set(flat)):
            raise ValueError("groups of one round must be disjoint")
        values = list(self.run_round(list(groups)))
        if len(values) != len(groups):
            raise ValueError(f"run_round returned {len(values)} figures for {len(groups)} groups")
        self.rounds.append(tuple(groups))
        for g, v in zip(groups, values):
            self.busbw["+".join(g)] = v
        return [v >= self.floor for v in values]


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def arrange_ring(nodes: Sequence[str], avoid: set[tuple[str, str]]) -> Group:
    """Order nodes so that known faulty links are not neighbours in the ring (greedy, best effort)."""
    rest = list(nodes)
    if not avoid or len(rest) < 3:
        return tuple(rest)
    order = [rest.pop(0)]
    while rest:
        nxt = next((c for c in rest if _key(order[-1], c) not in avoid), rest[0])
        rest.remove(nxt)
        order.append(nxt)
    return tuple(order)


def isolate(batch: Sequence[str], admitted: Sequence[str], run_round: RunRound, floor: float,
            ring_floor: float | None = None, ring_anchors: int = 2, min_good_failures: int = 2,
            bisect_min: int = 6) -> IsolationResult:
    """Attribute multi-node failures to nodes or links. Pure apart from the `run_round` callback.

    batch: nodes under test (preflight passed); admitted: nodes already in the pool (known good).
    floor: pair busbw gate (GB/s, ring algorithm); ring_floor: the ring's gate (default: floor).
    """
    run = _Runner(run_round, floor)
    ring_floor = floor if ring_floor is None else ring_floor
    batch = list(dict.fromkeys(batch))
    admitted_l = [a for a in dict.fromkeys(admitted) if a not in set(batch)]
    good_batch: list[str] = []  # batch nodes proven good, preferred as partners over admitted ones
    good_set = set(admitted_l)
    failed_pairs: set[tuple[str, str]] = set()
    tried: dict[str, set[str]] = {n: set() for n in batch}
    good_failures: dict[str, set[str]] = {n: set() for n in batch}
    quarantined: dict[str, str] = {}

    def mark_good(n: str) -> None:
        if n not in good_set:
            good_set.add(n)
            good_batch.append(n)

    # ---- round 1: everyone paired once; the odd one out with an admitted node when there is one
    pairs = [(batch[i], batch[i + 1]) for i in range(0, len(batch) - 1, 2)]
    pending: list[str] = []
    if len(batch) % 2:
        if admitted_l:
            pairs.append((batch[-1], admitted_l[0]))
        else:
            pending.append(batch[-1])
    if pairs:
        for (a, b), ok in zip(pairs, run(pairs)):
            for x, y in ((a, b), (b, a)):
                if x in tried:
                    tried[x].add(y)
            if ok:
                mark_good(a), mark_good(b)
            else:
                failed_pairs.add(_key(a, b))
                pending.extend(x for x in (a, b) if x in tried)
                if b in good_set:  # the partner was an admitted node: that failure counts
                    good_failures[a].add(b)

    # ---- bootstrap: no known-good node at all -> re-pair suspects among themselves until one pair passes
    for _ in range(2):
        if good_set or len(pending) < 2:
            break
        boot: list[Group] = []
        free = list(pending)
        while len(free) >= 2:
            a = free.pop(0)
            b = next((y for y in free if y not in tried[a]), None)
            if b is None:
                continue
            free.remove(b)
            boot.append((a, b))
        if not boot:
            break
        for (a, b), ok in zip(boot, run(boot)):
            tried[a].add(b), tried[b].add(a)
            if ok:
                mark_good(a), mark_good(b)
            else:
                failed_pairs.add(_key(a, b))
        pending = [p for p in pending if p not in good_set]

    # ---- attribution: each suspect re-paired with distinct known-good partners, in parallel rounds
    pending = [p for p in dict.fromkeys(pending) if p not in good_set]
    while pending:
        used: set[str] = set()
        round_pairs: list[Group] = []
        pool = good_batch + admitted_l
        for x in pending:
            g = next((g for g in pool if g not in used and g not in tried[x] and g != x), None)
            if g is not None:
                used.add(g)
                round_pairs.append((x, g))
        if not round_pairs:
            break
        for (x, g), ok in zip(round_pairs, run(round_pairs)):
            tried[x].add(g)
            if ok:
                mark_good(x)
            else:
                failed_pairs.add(_key(x, g))
                good_failures[x].add(g)
                if len(good_failures[x]) >= min_good_failures:
                    quarantined[x] = "efa-pair-fail"
        pending = [p for p in pending if p not in good_set and p not in quarantined]
    unresolved = list(pending)

    link_faults = sorted(p for p in failed_pairs if p[0] in good_set and p[1] in good_set)
    avoid = set(link_faults)

    # ---- ring over the batch's cleared nodes and into already-admitted nodes; bisect on failure
    cleared = [n for n in batch if n in good_set]
    ring_faults: list[Group] = []
    anchors = admitted_l[:ring_anchors]
    if len(cleared) + len(anchors) >= 3:
        ring = arrange_ring(cleared + anchors, avoid)
        run.floor = ring_floor
        if not run([ring])[0]:
            blamed, faults = _bisect(cleared, admitted_l, run, avoid, min_good_failures, bisect_min)
            quarantined.update({n: "ring-underperform" for n in blamed})
            ring_faults.extend(faults)
            if not blamed and not faults:
                ring_faults.append(ring)
    return IsolationResult(
        good=tuple(n for n in batch if n in good_set and n not in quarantined), quarantined=quarantined,
        link_faults=tuple(link_faults), ring_faults=tuple(ring_faults), unresolved=tuple(unresolved),
        rounds=tuple(run.rounds), busbw=run.busbw, floor=floor, ring_floor=ring_floor)


def _bisect(nodes: list[str], admitted: list[str], run: _Runner, avoid: set[tuple[str, str]],
            min_good_failures: int, bisect_min: int) -> tuple[list[str], list[Group]]:
    """Halve failing groups (in parallel rounds) down to small groups, then test each of their
    nodes in 3-node rings with known-good companions; blame a node that fails with
    `min_good_failures` different companion sets. Returns (blamed nodes, unexplained groups)."""
    failing: list[list[str]] = [list(nodes)]
    cleared: list[str] = list(admitted)
    terminal: list[list[str]] = []
    faults: list[Group] = []
    while failing:
        split: list[tuple[list[str], list[str], list[str]]] = []
        for g in failing:
            if len(g) >= bisect_min:
                mid = len(g) // 2
                split.append((g, g[:mid], g[mid:]))
            else:
                terminal.append(g)
        if not split:
            break
        groups = [arrange_ring(h, avoid) for _, a, b in split for h in (a, b)]
        oks = run(groups)
        failing = []
        for k, (parent, a, b) in enumerate(split):
            ok_a, ok_b = oks[2 * k], oks[2 * k + 1]
            for half, ok in ((a, ok_a), (b, ok_b)):
                if ok:
                    cleared.extend(half)
                else:
                    failing.append(half)
            if ok_a and ok_b:
                faults.append(tuple(parent))  # each half fine, the whole not: an interaction
    blamed: list[str] = []
    suspects = [n for g in terminal for n in g]
    fails: dict[str, int] = {n: 0 for n in suspects}
    used_sets: dict[str, set[str]] = {n: set() for n in suspects}
    pending = list(suspects)
    exonerated: set[str] = set()
    while pending:
        free = [c for c in cleared if c not in set(suspects)]
        groups: list[Group] = []
        for x in pending:
            comp = [c for c in free if c not in used_sets[x]][:2]
            if len(comp) < 2:
                continue
            for c in comp:
                free.remove(c)
            used_sets[x].update(comp)
            groups.append((x, *comp))
        if not groups:
            break
        for g, ok in zip(groups, run(groups)):
            if ok:
                exonerated.add(g[0])
            else:
                fails[g[0]] += 1
                if fails[g[0]] >= min_good_failures:
                    blamed.append(g[0])
        pending = [p for p in pending if p not in exonerated and p not in blamed]
    for g in terminal:
        if not any(n in blamed for n in g):
            faults.append(tuple(g))
    return blamed, faults
