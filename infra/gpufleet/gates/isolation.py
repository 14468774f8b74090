"""Multi-node fault isolation: pairs in parallel, attribution with known-good partners, then either
small rings and companion rings (a batch big enough to lend partners: at most 4 rounds for k <= 1%
faults, issue 21) or one ring and its bisection (a small batch).

Why this shape (research section d item 4; Google CHS two-pass): a failing pair says only
"one of us, or the link between us". Each suspect is re-paired with known-good nodes and is
quarantined only after failing with `min_good_failures` different good partners; a pair whose
two nodes both pass elsewhere is a link fault, reported and escalated, quarantining nobody.
Pairs miss faults that only show at scale, so a ring over the batch (and into already-admitted
nodes) follows; an underperforming ring is bisected down to nodes that are then tested in small
rings with known-good companions. Every step is a *round* of disjoint groups run in parallel;
the caller's `run_round` executes a round (see launch.py) and returns busbw per group.

Never blame a healthy node: no ring is laid over a link already known to be faulty (closing
edge included, `arrange_ring`), bisection halves are arcs of such a ring (`split_ring`), and a
suspect's companions are a pair proven to work together, never one it met before, so one bad
link can count against a node at most once. Tests: tests/gates/test_isolation.py (Hypothesis:
bad links on first-round pairs, on ring neighbours and at random, with and without admitted
nodes; rounds within 3 + k*ceil(log2 n) for k faults); tests/gates/test_isolation_scale.py
(2..1250 nodes, the bench's fault mixes at once: <= 4 rounds at scale). The few-rounds schedule
keeps the same rules (`_in_few_rounds`): counts only beside proven partners, never a partner twice.
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
    """Runs one round and keeps the schedule. Pairs are gated at `floor`, groups of three or more
    at `ring_floor` once it is set (a round may mix both: the few-rounds schedule does)."""

    def __init__(self, run_round: RunRound, floor: float,
                 group_floor: Callable[[int], float] | None = None) -> None:
        self.run_round, self.floor, self.group_floor = run_round, floor, group_floor
        self.ring_floor: float | None = None
        self.rounds: list[tuple[Group, ...]] = []
        self.busbw: dict[str, float] = {}
        self.proven: dict[tuple[str, str], None] = {}  # links that were neighbours in a passing group, in order
        self.doubted: set[tuple[str, str]] = set()  # links of failing groups (one of them may be the fault)

    def __call__(self, groups: Sequence[Group]) -> list[bool]:
        flat = [n for g in groups for n in g]
        if len(flat) != len(set(flat)):
            raise ValueError("groups of one round must be disjoint")
        values = list(self.run_round(list(groups)))
        if len(values) != len(groups):
            raise ValueError(f"run_round returned {len(values)} figures for {len(groups)} groups")
        self.rounds.append(tuple(groups))
        oks = [v >= self.gate(g) for g, v in zip(groups, values)]
        for g, v, ok in zip(groups, values, oks):
            self.busbw["+".join(g)] = v
            if ok:
                self.proven.update(dict.fromkeys(ring_edges(g)))
            else:
                self.doubted.update(ring_edges(g))
        return oks

    def gate(self, group: Group) -> float:
        if len(group) < 3 or self.ring_floor is None:
            return self.floor
        return self.group_floor(len(group)) if self.group_floor is not None else self.ring_floor


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def ring_edges(group: Sequence[str]) -> list[tuple[str, str]]:
    """The links a group exercises: its one pair, or every neighbour pair of the ring, closing edge included."""
    n = len(group)
    if n < 2:
        return []
    if n == 2:
        return [_key(group[0], group[1])]
    return [_key(group[i], group[(i + 1) % n]) for i in range(n)]


def ring_avoids(group: Sequence[str], avoid: set[tuple[str, str]]) -> bool:
    return not any(e in avoid for e in ring_edges(group))


def arrange_ring(nodes: Sequence[str], avoid: set[tuple[str, str]]) -> Group:
    """Order nodes into a ring in which no known faulty link is a neighbour pair, closing edge included.

    Why: a ring over a known-bad link fails for a reason already known and blames whoever is
    tested next. Greedy first (usually enough), then 2-opt repair: for a bad edge (a, b) find a
    later edge (c, d) with a-c and b-d both allowed and reverse b..c; each move removes the bad
    edge without adding one, so it ends. Best effort: when no such ring exists (a triangle over a
    bad link) the order with fewest bad edges is returned; `ring_avoids` tells the caller.
    """
    order = list(dict.fromkeys(nodes))
    if not avoid or len(order) < 3:
        return tuple(order)
    rest = order[1:]
    order = order[:1]
    while rest:
        nxt = next((c for c in rest if _key(order[-1], c) not in avoid), rest[0])
        rest.remove(nxt)
        order.append(nxt)
    n = len(order)
    for _ in range(n):
        bad = next((i for i in range(n) if _key(order[i], order[(i + 1) % n]) in avoid), None)
        if bad is None:
            break
        order = order[bad:] + order[:bad]  # the bad edge is now (order[0], order[1])
        a, b = order[0], order[1]
        j = next((j for j in range(2, n - 1)
                  if _key(a, order[j]) not in avoid and _key(b, order[j + 1]) not in avoid), None)
        if j is None:
            break
        order[1:j + 1] = reversed(order[1:j + 1])
    return tuple(order)


def split_ring(group: Sequence[str], avoid: set[tuple[str, str]]) -> tuple[Group, Group]:
    """Two halves of a group, each a ring without known faulty neighbours when that is possible.

    Why arcs of one clean ring: their inner links are clean already, so only the two closing
    edges need a rotation that suits them; arranging each half alone can strand a known-bad
    link inside a half too small to avoid it (a triangle).
    """
    ring = arrange_ring(group, avoid)
    n, mid = len(ring), len(ring) // 2
    for r in range(n):
        rot = ring[r:] + ring[:r]
        a, b = rot[:mid], rot[mid:]
        if ring_avoids(a, avoid) and ring_avoids(b, avoid):
            return tuple(a), tuple(b)
    return arrange_ring(ring[:mid], avoid), arrange_ring(ring[mid:], avoid)


def isolate(batch: Sequence[str], admitted: Sequence[str], run_round: RunRound, floor: float,
            ring_floor: float | None = None, ring_anchors: int = 2, min_good_failures: int = 2,
            bisect_min: int = 6, ring_size: int = 4, few_rounds: bool = True,
            group_floor: Callable[[int], float] | None = None) -> IsolationResult:
    """Attribute multi-node failures to nodes or links. Pure apart from the `run_round` callback.

    batch: nodes under test (preflight passed); admitted: nodes already in the pool (known good).
    floor: pair busbw gate (GB/s, ring algorithm); ring_floor: the ring's gate (default: floor).
    group_floor: the gate of a group of three or more by its size (a measured curve falls with
    node count, so a 4-node ring of the few-rounds schedule is held to the 4-node floor, not to
    the floor of a ring over the whole batch); default: ring_floor for every group.
    After the first round of pairs, a batch with enough cleared nodes to lend every suspect its
    partners (`few_rounds_fit`) takes the few-rounds schedule (`_in_few_rounds`: small rings of
    `ring_size` instead of one ring and its bisection); a small one keeps the bootstrap, the one
    ring and the bisection below, which need no reserve. few_rounds=False keeps the latter for
    any batch (the bench prints both schedules side by side).
    """
    run = _Runner(run_round, floor, group_floor)
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

    cleared_r1 = [n for n in batch if n in good_set]
    if few_rounds and few_rounds_fit(len(batch), len(cleared_r1), len(pending), ring_size):
        run.ring_floor = ring_floor
        return _in_few_rounds(batch, admitted_l, run, list(pending), cleared_r1, failed_pairs, good_failures,
                              min_good_failures, ring_size, floor, ring_floor)

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
        run.ring_floor = ring_floor
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
    `min_good_failures` different companion pairs. Returns (blamed nodes, unexplained groups).

    Why companions are a *proven pair* (two cleared nodes that were neighbours in a passing run,
    or two admitted nodes) and never across a known faulty link: a triangle exercises all three
    of its links, so a companion pair over a bad link fails for a reason that is not the suspect's.
    """
    failing: list[Group] = [tuple(nodes)]
    cleared: list[str] = list(admitted)
    terminal: list[Group] = []
    faults: list[Group] = []
    while failing:
        split: list[tuple[Group, Group, Group]] = []
        for g in failing:
            if len(g) >= bisect_min:
                split.append((g, *split_ring(g, avoid)))
            else:
                terminal.append(g)
        if not split:
            break
        oks = run([h for _, a, b in split for h in (a, b)])
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
    blamed = _test_with_companions(terminal, cleared, admitted, run, avoid, min_good_failures)
    faults.extend(tuple(g) for g in terminal if not any(n in blamed for n in g))
    return blamed, faults


def _test_with_companions(terminal: list[Group], cleared: list[str], admitted: list[str], run: _Runner,
                          avoid: set[tuple[str, str]], min_good_failures: int) -> list[str]:
    """Each suspect in 3-node rings with proven companion pairs, in parallel rounds, until it
    passes once (exonerated) or fails with `min_good_failures` disjoint pairs (blamed).

    Companion pairs are scarce when the cleared part is small (or every half failed); suspects
    left without one share a ring with other suspects (and a cleared node when one is free)
    instead, one from each of different failing groups where possible (a fault inside a group
    then stays out of the ring). A shared ring that passes clears all its suspects, whose links
    then serve as companion pairs; one that fails counts against nobody.
    """
    group_of = {n: k for k, g in enumerate(terminal) for n in g}
    # round-robin over the failing groups, so that neighbours in this list come from different groups
    suspects = [g[i] for i in range(max((len(g) for g in terminal), default=0)) for g in terminal if i < len(g)]
    blocked = set(suspects)
    usable = [c for c in dict.fromkeys(cleared) if c not in blocked]
    admitted_pairs = [_key(a, b) for a, b in zip(admitted[::2], admitted[1::2])]
    fails = {x: 0 for x in suspects}
    shared_left = {x: min_good_failures for x in suspects}  # shared rings a suspect may still join
    met: dict[str, set[str]] = {x: set() for x in suspects}  # companions a suspect was tested with
    tried_shared: set[frozenset[str]] = {frozenset(g) for g in terminal}  # each of them failed already
    tested: set[str] = set()
    blamed: list[str] = []
    pending = list(suspects)

    def allowed(*group: str) -> bool:
        return ring_avoids(group, avoid)

    def doubt(group: Group) -> tuple[int, int]:
        """(links that sat in a failing group and never in a passing one, minus links proven): the
        ring least likely to fail for a reason other than its suspect sorts first."""
        edges = ring_edges(group)
        return (sum(1 for e in edges if e in run.doubted and e not in run.proven),
                -sum(1 for e in edges if e in run.proven))

    while pending:
        usable_set = set(usable)
        pairs = list(dict.fromkeys([e for e in run.proven if e[0] in usable_set and e[1] in usable_set]
                                   + admitted_pairs))
        used: set[str] = set()

        def assign(candidates: list[str], taken: set[str]) -> list[Group]:
            out = []
            for x in candidates:
                # never a companion met before: one bad link to it would count twice against x
                pair = min((p for p in pairs if p[0] not in taken and p[1] not in taken and p[0] not in met[x]
                            and p[1] not in met[x] and allowed(x, *p)), key=lambda p: doubt((x, *p)), default=None)
                if pair is not None:
                    taken.update((x, *pair))
                    out.append((x, *pair))
            return out

        # suspects that failed a shared ring are tested alone first; fresh ones alone only when there
        # are companions for all of them, else they share rings (more of them tested per round)
        solo = assign([x for x in pending if x in tested], used)
        fresh = [x for x in pending if x not in tested]
        trial = set(used)
        fresh_solo = assign(fresh, trial)
        if len(fresh_solo) == len(fresh):
            solo += fresh_solo
            used = trial
        for g in solo:
            met[g[0]].update(g[1:])
        shared: list[Group] = []
        waiting = [x for x in pending if x not in used and shared_left[x] > 0]
        waiting.sort(key=lambda x: x in tested)  # fresh suspects first
        free = [c for c in usable if c not in used]
        while len(waiting) >= 2:
            x = waiting.pop(0)
            group = min(((x, y, c) for y in waiting for c in free[:64] + [z for z in waiting if z != y]
                         if allowed(x, y, c) and frozenset((x, y, c)) not in tried_shared),
                        key=lambda g: (doubt(g)[0], sum(group_of.get(m) == group_of[x] for m in g[1:]), doubt(g)[1]),
                        default=None)
            if group is None:
                continue
            tried_shared.add(frozenset(group))
            for m in group:
                if m in waiting:
                    waiting.remove(m)
                if m in free:
                    free.remove(m)
                if m in shared_left:
                    shared_left[m] -= 1
            shared.append(group)
        in_shared = {m for g in shared for m in g}
        late = assign([x for x in pending if x not in used and x not in in_shared], used | in_shared)
        solo += late
        for g in late:
            met[g[0]].update(g[1:])
        if not solo and not shared:
            break  # no companions left: the suspect's group is escalated, nobody blamed
        exonerated: set[str] = set()
        tested.update(m for g in solo + shared for m in g if m in blocked)
        results = run(solo + shared)
        for g, ok in zip(solo, results):
            if ok:
                exonerated.add(g[0])
            else:
                fails[g[0]] += 1
                if fails[g[0]] >= min_good_failures:
                    blamed.append(g[0])
        for g, ok in zip(shared, results[len(solo):]):
            if ok:
                exonerated.update(m for m in g if m in blocked)
        usable.extend(x for x in pending if x in exonerated)
        pending = [p for p in pending if p not in exonerated and p not in blamed]
    return blamed


def few_rounds_fit(n: int, cleared: int, suspects: int, ring_size: int = 4) -> bool:
    """Whether the batch can take the few-rounds schedule after its first round of pairs.

    Why these figures: each suspect borrows one cleared node as its partner in round 2, and in
    round 3 every node still in doubt (suspects, their partners, the members of failing small
    rings) needs a proven pair of companions of its own; six cleared nodes per suspect plus a
    margin leave the small rings enough passing members for that even when several fail. Below
    64 nodes the one ring and its bisection take few rounds anyway and need no reserve."""
    return n >= 64 and cleared >= 6 * suspects + 4 * ring_size + 8


def _in_few_rounds(batch: list[str], admitted: list[str], run: _Runner, suspects: list[str], cleared: list[str],
                   failed_pairs: set[tuple[str, str]], good_failures: dict[str, set[str]], min_good_failures: int,
                   ring_size: int, floor: float, ring_floor: float) -> IsolationResult:
    """Round 1 (pairs) has run. Round 2: each suspect with a cleared partner of its own, the other
    cleared nodes in small rings; round 3 on: every node still in doubt in a 3-node ring with a
    proven pair of companions, until it passes once or fails with `min_good_failures` of them.

    Why it ends in 4 rounds: a bad node fails round 1, its partner in round 2 (one count) and
    its companions in round 3 (two); a ring-only node fails its small ring in round 2 (no count:
    its ring-mates are not proven), then its companions in rounds 3 and 4. Every healthy node
    passes a ring by round 3 unless a link to one of its companions is bad, and then round 4.
    Why it never blames a healthy node: a count needs a partner proven good for what the group
    tests (a pair partner that passed a pair; companions that passed a ring, joined by a link
    that passed one), and a node never meets again anyone it failed beside, so one bad link
    counts against it at most once. The small rings are laid from the second node of the first
    pair on, so that, with round 1's pairs, they cross every link the one ring of the old
    schedule crossed. A node that runs out of companions stays unresolved, never admitted untested.
    """
    fails = {x: len(good_failures.get(x, ())) for x in batch}
    met: dict[str, set[str]] = {x: set(good_failures.get(x, ())) for x in batch}
    pair_good = set(cleared) | set(admitted)  # passed a pair (or already in the pool)
    proven = set(admitted)  # passed a ring with proven links, or already in the pool
    edges: dict[tuple[str, str], None] = dict.fromkeys(_key(a, b) for a, b in zip(admitted[::2], admitted[1::2]))
    quarantined: dict[str, str] = {}
    unexplained: list[Group] = []

    def failed(group: Group, counted: str | None) -> None:
        for m in group:
            if m in met:
                met[m].update(o for o in group if o != m)
        if counted is not None:
            fails[counted] += 1
            if fails[counted] >= min_good_failures:
                quarantined[counted] = "ring-underperform" if counted in pair_good else "efa-pair-fail"

    # ---- round 2: partners for the suspects from the end of the cleared list, small rings over the rest
    lend = cleared[len(cleared) - len(suspects):] if suspects else []
    rest = cleared[:len(cleared) - len(lend)]
    rest = rest[1:] + rest[:1]
    rings = [tuple(rest[i:i + ring_size]) for i in range(0, len(rest) - len(rest) % ring_size, ring_size)]
    tail = rest[len(rest) - len(rest) % ring_size:] if len(rest) % ring_size else []
    if tail and rings:
        rings[-1] = rings[-1] + tuple(tail)
    elif tail:
        rings = [tuple(tail)] if len(tail) >= 3 else []
    attribution = list(zip(suspects, lend))
    oks = run(attribution + rings)
    for (x, p), ok in zip(attribution, oks):
        if ok:
            pair_good.add(x)
        else:
            failed_pairs.add(_key(x, p))
            failed((x, p), x)
    failing_rings: list[Group] = []
    for g, ok in zip(rings, oks[len(attribution):]):
        if ok:
            proven.update(g)
            edges.update(dict.fromkeys(ring_edges(g)))
        else:
            failing_rings.append(g)
            failed(g, None)

    # ---- round 3 on: companions for every node not yet proven in a ring
    todo = [x for x in batch if x not in proven and x not in quarantined]
    while todo:
        avoid = {p for p in failed_pairs if p[0] in pair_good and p[1] in pair_good}
        todo.sort(key=lambda x: -fails[x])  # the nearest to a verdict first
        used: set[str] = set()
        groups: list[Group] = []
        order = list(edges)
        for x in todo:
            pair = next((e for e in order if e[0] not in used and e[1] not in used and e[0] not in met[x]
                         and e[1] not in met[x] and x not in e and _key(x, e[0]) not in avoid
                         and _key(x, e[1]) not in avoid), None)
            if pair is not None:
                used.update((x, *pair))
                groups.append((x, *pair))
        if not groups:
            break
        for g, ok in zip(groups, run(groups)):
            x = g[0]
            if ok:
                proven.add(x)
                pair_good.add(x)
                edges.update(dict.fromkeys(ring_edges(g)))
            else:
                failed(g, x)
                if x not in quarantined:
                    unexplained.append(g)
        todo = [x for x in todo if x not in proven and x not in quarantined]

    link_faults = sorted(p for p in failed_pairs if p[0] in pair_good and p[1] in pair_good
                         and p[0] not in quarantined and p[1] not in quarantined)
    ring_faults = [g for g in failing_rings if not set(g) & set(quarantined)]
    ring_faults += [g for g in unexplained if g[0] in proven]  # a link from it to a companion, most likely
    return IsolationResult(
        good=tuple(n for n in batch if n in proven and n not in quarantined), quarantined=quarantined,
        link_faults=tuple(link_faults), ring_faults=tuple(ring_faults),
        unresolved=tuple(n for n in batch if n not in proven and n not in quarantined),
        rounds=tuple(run.rounds), busbw=run.busbw, floor=floor, ring_floor=ring_floor)
