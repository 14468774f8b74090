"""The simulated fleet's faults: what each kind does, where the seed puts them, and the ground truth.

Why a table of effects: the simulator must never decide. It only renders a fault into tool
output; the real gates decide. The table says what a fault looks like to the *gates* (the reason
codes they must give, as the research buckets it) so tests and the rollout's end-to-end checks can
compare the gates' decisions with the seeded truth. Pure: no I/O, the same seed gives the same fleet.
"""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from gpufleet.errors import ConfigError
from gpufleet.plan.model import ClusterPlan
from gpufleet.spec import SimulatorConfig

Stage = Literal["configure", "preflight", "multinode", "latent"]
Remedy = Literal["reset-gpu", "reboot"]
Final = Literal["admitted", "quarantined", "unreachable", "configure-failed"]


@dataclass(frozen=True)
class FaultEffect:
    """How one fault kind shows and ends (gates-research.md (a) rows and the Xid bucket table).

    `reason_codes`: codes the real gates must give for it (all of them, the first is the one the
    gates put first); `clears_with`: the remediation that removes it (a reboot also clears what a
    reset clears), None when it recurs (bad hardware); `final`: where the node ends when the
    rollout follows the gates (remediate once, retest, quarantine on a second failure).
    """

    kind: str
    stage: Stage
    reason_codes: tuple[str, ...]
    first_action: Literal["retest", "quarantine", "none"]
    clears_with: Remedy | None
    final: Final
    why: str


def _e(kind: str, stage: Stage, codes: tuple[str, ...], first: str, clears: Remedy | None, why: str) -> FaultEffect:
    if stage == "configure":
        final: Final = "unreachable" if kind == "unreachable" else "configure-failed"
    elif stage == "latent":
        final = "admitted"  # nothing a preflight runs can see it: it enters the pool (counted apart)
    elif first == "retest" and clears is not None:
        final = "admitted"
    else:
        final = "quarantined"
    return FaultEffect(kind, stage, codes, first, clears, final, why)  # type: ignore[arg-type]


EFFECTS: dict[str, FaultEffect] = {e.kind: e for e in (
    _e("ecc-uncorrectable", "preflight", ("ecc-uncorrectable",), "retest", None,
       "volatile uncorrectable ECC > 0: R; a bad HBM stack errors again after the reset (research (a) #8)"),
    _e("row-remap-failure", "preflight", ("row-remap-failure",), "quarantine", None,
       "remapped_rows.failure = Yes is sticky: RMA path (research (a) #9)"),
    _e("row-remap-pending", "preflight", ("row-remap-pending",), "retest", "reset-gpu",
       "a pending remap is applied by a GPU reset (NVML nvmlDeviceGetRemappedRows; research (a) #9)"),
    _e("xid-79", "preflight", ("gpu-count", "xid-79"), "quarantine", None,
       "GPU fell off the bus: it is gone from nvidia-smi; Q (research Xid table)"),
    _e("xid-48", "preflight", ("xid-48",), "quarantine", None, "double-bit ECC error: Q (research Xid table)"),
    _e("xid-64", "preflight", ("xid-64",), "quarantine", None,
       "row-remapper failure: RMA path, Q (research Xid table)"),
    _e("xid-74", "preflight", ("xid-74",), "retest", None,
       "NVLink error: R, Q when it recurs; this link errors again after a reboot (research Xid table)"),
    _e("xid-119", "preflight", ("xid-119",), "retest", "reboot",
       "GSP RPC timeout: R; a reboot starts a new kernel log and a fresh GSP (research Xid table)"),
    _e("nvlink-down", "preflight", ("nvlink-down",), "quarantine", None, "links <inactive>: Q (research (a) #17)"),
    _e("efa-missing", "preflight", ("efa-missing",), "quarantine", None,
       "no EFA device: fi_getinfo -61, NCCL falls back to sockets: Q (research (a) #28, #36)"),
    _e("slow-nvlink", "preflight", ("busbw-below-floor",), "quarantine", None,
       "degraded NVLinks: intra-node busbw under the SKU floor (research (a) #34)"),
    _e("bad-nic", "multinode", ("efa-pair-fail",), "none", None,
       "slow EFA on one node: every pair with it fails, with known-good partners too (research (d) item 4)"),
    _e("version-skew", "preflight", ("version-nccl",), "quarantine", None,
       "an older NCCL than the BOM's: Q (research (a) #3)"),
    _e("image-missing", "preflight", ("image-missing", "image-gpus-not-visible"), "retest", None,
       "the pre-pull missed the node: the image is not listed and a container of it cannot start; a reboot "
       "pulls nothing, so the retest fails again"),
    _e("unreachable", "configure", (), "none", None, "SSH/SSM never answers: the host is UNREACHABLE"),
    _e("configure-failed", "configure", (), "none", None, "a site.yml task fails on this host"),
    # --- the field's quirks (issue 19): what real nodes print that a clean simulator never did
    _e("fabric-unhealthy", "preflight", ("fabric-route-unhealthy",), "quarantine", None,
       "driver 570+: Fabric > Health > Summary Unhealthy, Route Unhealthy True on one GPU, registration "
       "Completed/Success beside it"),
    _e("fabric-degraded-bandwidth", "preflight", ("fabric-bandwidth-degraded",), "quarantine", None,
       "driver 570+: Fabric > Health > Bandwidth Degraded (NVLinks to the NVSwitches lost), Summary still Healthy"),
    _e("fabric-in-progress", "preflight", ("fabric-not-ready",), "retest", "reboot",
       "fabric registration In Progress at collection time; a reboot restarts the fabric manager, which registers"),
    _e("fabric-insufficient-resources", "preflight", ("fabric-not-ready",), "retest", None,
       "registration Completed with Status Insufficient Resources (nvml FABRIC_STATUS): the NVSwitch side refuses "
       "the GPU again after a reboot"),
    _e("output-unreadable", "preflight", ("unreadable-nvidia-smi-q",), "retest", "reset-gpu",
       "nvidia-smi -q cut off mid-document (a collector timeout): unreadable, retest; the next collection is whole"),
    _e("xid-mig", "preflight", ("xid-48",), "quarantine", None,
       "a double-bit ECC Xid in the MIG form `Xid (PCI:0000:xx:00 GPU-I:05): 48` (GPU instance named)"),
    _e("tool-missing", "preflight", ("tool-missing-dcgmi",), "retest", None,
       "dcgmi not installed on the image: `command not found`, exit 127; not the GPUs' fault, so a retest, "
       "which a reboot does not fix (the image lacks it)"),
    _e("nic-count-short", "preflight", ("efa-missing",), "quarantine", None,
       "half the SKU's EFA devices: fi_info and NCCL's `found N nics` list 16 of a p5's 32"),
    _e("plugin-beta", "preflight", ("version-aws-ofi-nccl",), "quarantine", None,
       "aws-ofi-nccl 1.16.0-beta against a BOM pin of 1.16.0: a pre-release is skew, not the pinned release"),
    # --- invisible at admission: the field data's classes no preflight can see (counted apart)
    _e("latent", "latent", (), "none", None,
       "present on the node but invisible to every admission check (silent data corruption that needs a long "
       "burn-in, a thermal interface that fails under days of load, a training-code bug, host maintenance)"),
)}
LATENT = frozenset(k for k, e in EFFECTS.items() if e.stage == "latent")

SYSTEMIC_CODES = {"nccl-socket-fallback": ("efa-socket-fallback",), "driver-broken": ("nvidia-smi-failed",)}
CONFIGURE_FAILED_TASK = "nvidia_driver : Install and hold the pinned driver stack"


@dataclass(frozen=True)
class SlotTruth:
    slot: str
    batch: int
    fault: str
    effect: FaultEffect


@dataclass(frozen=True)
class Truth:
    """The seeded ground truth, for tests and the rollout's end-to-end checks (never for decisions)."""

    faulty: Mapping[str, SlotTruth]  # slot -> its first instance's fault
    bad_links: tuple[tuple[str, str], ...]  # each pair sorted
    shortfall: Mapping[str, int]  # slot -> provision calls that come back without it
    bad_replacements: Mapping[str, int]  # slot -> how many replacements in a row carry its fault again
    systemic: str = "none"
    systemic_codes: tuple[str, ...] = ()  # what the gates give every node under the systemic fault


@dataclass(frozen=True)
class FaultPlan:
    """Where the seed put everything; `truth()` is its read-only view."""

    faults: Mapping[str, str]  # slot -> fault kind (generation 0)
    bad_links: tuple[tuple[str, str], ...]
    shortfall: Mapping[str, int]
    bad_replacements: Mapping[str, int]
    systemic: str
    batch_of: Mapping[str, int] = field(default_factory=dict)

    def fault_of(self, slot: str, generation: int) -> str | None:
        """The fault of the slot's `generation`-th instance (0: the first; replacements count up)."""
        if generation == 0:
            return self.faults.get(slot)
        if generation <= self.bad_replacements.get(slot, 0):
            return self.faults.get(slot)
        return None

    def to_json(self) -> dict:
        return {"digest": self.digest(), "faults": dict(sorted(self.faults.items())),
                "bad_links": [list(p) for p in self.bad_links], "shortfall": dict(sorted(self.shortfall.items())),
                "bad_replacements": dict(sorted(self.bad_replacements.items())), "systemic": self.systemic}

    def digest(self) -> str:
        body = json.dumps([sorted(self.faults.items()), self.bad_links, sorted(self.shortfall.items()),
                           sorted(self.bad_replacements.items()), self.systemic])
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()

    def truth(self) -> Truth:
        faulty = {s: SlotTruth(s, self.batch_of.get(s, 0), k, EFFECTS[k]) for s, k in sorted(self.faults.items())}
        return Truth(faulty=faulty, bad_links=self.bad_links, shortfall=dict(self.shortfall),
                     bad_replacements=dict(self.bad_replacements), systemic=self.systemic,
                     systemic_codes=SYSTEMIC_CODES.get(self.systemic, ()))


def check_image_faults(cfg: SimulatorConfig, workload_image: str | None) -> None:
    """An `image-missing` fault needs the stack's workload image: without one the gates check no
    image, and the seeded node would pass where the truth says it fails."""
    if cfg.faults.get("image-missing") and workload_image is None:
        raise ConfigError("the simulator seeds `image-missing` faults, but the stack pins no workload image",
                          field="gpufleet:simulator.faults.image-missing",
                          expected="gpufleet:acceptance.workloadImage set (repo@sha256:...), or no image-missing fault")


def fault_counts(cfg: SimulatorConfig, nodes: int) -> list[tuple[str, int]]:
    """Kind -> node count: integers as given, shares rounded (at least one node when above 0)."""
    out = []
    for kind in sorted(cfg.faults):
        n = cfg.faults[kind]
        count = int(n) if n >= 1 else (max(1, round(n * nodes)) if n > 0 else 0)
        if count:
            out.append((kind, count))
    return out


def place_faults(plan: ClusterPlan, cfg: SimulatorConfig) -> FaultPlan:
    """Seeded placement, spread over batches in proportion to their size.

    Why spread: a batch's failure rate halts the rollout (rollout.maxFailureRate); a uniform draw
    can pile a realistic few percent into one batch and turn a healthy fleet into a halted one.
    Bad links go between the first two slots of a batch (healthy both): a link no pair or ring
    crosses is invisible to every gate, and the round-1 pairing crosses exactly that one.
    """
    rng = random.Random(cfg.seed)
    batches = {b.number: [s for s in plan.batch_nodes(b.number)] for b in plan.batches}
    free = {n: [s.name for s in slots] for n, slots in batches.items()}
    batch_of = {s.name: s.batch for s in plan.nodes}

    links: list[tuple[str, str]] = []
    link_batches = [n for n, slots in batches.items() if len(slots) >= 2]
    rng.shuffle(link_batches)
    for number in link_batches[:cfg.bad_links]:
        a, b = free[number][0], free[number][1]
        links.append((a, b) if a <= b else (b, a))
        free[number] = free[number][2:]
    if len(links) < cfg.bad_links:
        raise ConfigError(f"{cfg.bad_links} bad links need {cfg.bad_links} batches of two or more nodes; "
                          f"the plan has {len(link_batches)}", field="gpufleet:simulator.badLinks",
                          expected=f"at most {len(link_batches)}")

    kinds = [k for k, n in fault_counts(cfg, len(plan.nodes)) for _ in range(n)]
    rng.shuffle(kinds)
    placed: dict[str, str] = {}
    per_batch = {n: 0 for n in batches}
    order = list(batches)
    rng.shuffle(order)  # ties between equally loaded batches go in a seeded order
    for kind in kinds:
        candidates = [n for n in order if free[n]]
        if not candidates:
            raise ConfigError(f"{len(kinds)} faulty nodes do not fit in a plan of {len(plan.nodes)} nodes "
                              f"({len(links)} bad links take two healthy nodes each)",
                              field="gpufleet:simulator.faults",
                              expected=f"at most {len(plan.nodes) - 2 * len(links)} faulty nodes in all")
        number = min(candidates, key=lambda n: (per_batch[n] + 1) / len(batches[n]))
        slot = free[number].pop(rng.randrange(len(free[number])))
        placed[slot] = kind
        per_batch[number] += 1

    shortfall: dict[str, int] = {}
    cs = cfg.capacity_shortfall
    if cs is not None:
        if cs.batch not in batches:
            raise ConfigError(f"batch {cs.batch} is not in the plan",
                              field="gpufleet:simulator.capacityShortfall.batch",
                              expected=f"a batch number from 1 to {len(batches)}")
        for s in batches[cs.batch][-cs.count:]:
            shortfall[s.name] = cs.failed_attempts

    bad_repl: dict[str, int] = {}
    if cfg.bad_replacements.slots:
        # a repeat is only visible when the fault fails the gates again: permanent preflight faults first
        ranked = sorted(placed, key=lambda s: (EFFECTS[placed[s]].final != "quarantined",
                                               EFFECTS[placed[s]].stage != "preflight", s))
        for s in ranked[:cfg.bad_replacements.slots]:
            bad_repl[s] = cfg.bad_replacements.generations
    return FaultPlan(faults=placed, bad_links=tuple(sorted(links)), shortfall=shortfall, bad_replacements=bad_repl,
                     systemic=cfg.systemic, batch_of=batch_of)


def active_faults(kind: str | None, remedies: Sequence[str]) -> str | None:
    """The fault that is still there after the remediations applied to this instance."""
    if kind is None:
        return None
    clears = EFFECTS[kind].clears_with
    if clears is None:
        return kind
    if clears in remedies or (clears == "reset-gpu" and "reboot" in remedies):
        return None
    return kind


def jitter(seed: int, slot: str, generation: int, steps: int = 3, step: float = 0.005) -> float:
    """A node's bandwidth factor around 1.0 (healthy nodes differ slightly, as real cohorts do).

    Quantized to a few values so healthy nodes share a handful of rendered templates; a CRC, not
    a seeded Random, because it is asked once per node per stage."""
    h = zlib.crc32(f"{seed}/{slot}/{generation}".encode()) % (2 * steps + 1) - steps
    return 1.0 + h * step
