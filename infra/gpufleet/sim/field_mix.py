"""Published failure mixes, each class mapped to the simulator fault kinds a preflight would meet.

Why published data: a gate measured only on faults its authors chose is measured on what they
thought of. These are the field's own counts. Each class says what an admission preflight can
see of it: the fault kinds it renders as (weights within the class), or LATENT when nothing an
admission check runs can show it (it is injected, enters the pool and is counted apart, never
hidden). Pure data and a seeded draw; bench/bench_field.py replays them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping

from gpufleet.errors import ConfigError

LATENT = "latent"


@dataclass(frozen=True)
class FailureClass:
    name: str
    count: float  # the source's count (or per-cent share)
    kinds: Mapping[str, float]  # simulator fault kind -> weight within the class
    why: str  # why a preflight can or cannot see it

    @property
    def visible(self) -> bool:
        return LATENT not in self.kinds


@dataclass(frozen=True)
class FailureMix:
    name: str
    source: str
    classes: tuple[FailureClass, ...]


def _c(name: str, count: float, kinds: Mapping[str, float] | str, why: str) -> FailureClass:
    return FailureClass(name, count, {kinds: 1.0} if isinstance(kinds, str) else dict(kinds), why)


LLAMA3 = FailureMix(
    "llama3",
    "The Llama 3 Herd of Models (Meta, 2024), section 3.3.4, table 5: root causes of the 419 unexpected "
    "interruptions of 54 days of pre-training on 16,384 H100 (table reproduced at "
    "glennklockwood.com/garden/component-reliability; /work/shared/reference/field-data.md)",
    (
        _c("faulty GPU", 148, {"xid-79": 3, "xid-74": 2, "nvlink-down": 1, "slow-nvlink": 1, "fabric-unhealthy": 1,
                               "fabric-degraded-bandwidth": 1, "xid-mig": 1},
           "a GPU off the bus, NVLink errors and lost links, fabric health: in nvidia-smi, the kernel log, NCCL"),
        _c("GPU HBM3 memory", 72, {"ecc-uncorrectable": 2, "row-remap-failure": 1, "row-remap-pending": 1,
                                   "xid-48": 1, "xid-64": 1},
           "uncorrectable ECC, row-remap state and their Xids: in the query CSV, -q and the kernel log"),
        _c("software bug", 54, LATENT, "a bug in the training job shows under the job, not in a preflight"),
        _c("network switch/cable", 35, "bad-nic", "a bad cable or optic slows every pair with the node: multinode"),
        _c("host maintenance", 32, LATENT, "unplanned maintenance of a healthy host: nothing to see at admission"),
        _c("GPU SRAM memory", 19, "ecc-uncorrectable", "SRAM uncorrectable errors count in the volatile ECC total"),
        _c("GPU system processor", 17, "xid-119", "a GSP RPC timeout: Xid 119 in the kernel log"),
        _c("NIC", 7, {"efa-missing": 1, "nic-count-short": 1}, "EFA devices missing: fi_info, lspci, NCCL's nic count"),
        _c("NCCL watchdog timeouts", 7, LATENT, "a collective hang under the job's own traffic pattern"),
        _c("silent data corruption", 6, LATENT, "needs a long burn-in with known answers; a preflight's minutes miss it"),
        _c("GPU thermal interface + sensor", 6, LATENT, "shows under days of sustained load, not in a short diag"),
        _c("SSD", 3, LATENT, "the preflight tests the shared file system, not the local NVMe"),
        _c("power supply", 3, LATENT, "a failed redundant PSU leaves the host running"),
        _c("server chassis", 2, "unreachable", "the host does not answer: configure finds it"),
        _c("IO expansion board", 2, "xid-79", "a GPU behind the board drops off the bus"),
        _c("dependency", 2, LATENT, "an outside service the job uses"),
        _c("CPU", 2, LATENT, "no CPU stress in the preflight"),
        _c("system memory", 2, LATENT, "no host memory test in the preflight"),
    ))

CRUSOE = FailureMix(
    "crusoe",
    "Crusoe, H200 cluster, GTC 2025 talk (shares of about 205 failures over four months, as summarised at "
    "glennklockwood.com/garden/component-reliability); InfiniBand mapped to the EFA faults of this AWS stack",
    (
        _c("GPU recoverable faults", 19.5, {"row-remap-pending": 1, "xid-119": 1, "fabric-in-progress": 1},
           "cleared by a GPU reset or a reboot: the preflight flags them, remediation clears them"),
        _c("GPU host replacement", 41.5, {"xid-79": 2, "ecc-uncorrectable": 2, "row-remap-failure": 1, "xid-48": 1,
                                          "xid-64": 1, "nvlink-down": 1, "fabric-unhealthy": 1,
                                          "fabric-insufficient-resources": 1},
           "hardware that needs the host replaced: Xids, ECC, remap failure, links, fabric health"),
        _c("other host issues (CPU, memory)", 4.9, LATENT, "no CPU or host-memory test in the preflight"),
        _c("InfiniBand recoverable faults", 4.9, LATENT, "a link flap that has recovered before the preflight runs"),
        _c("InfiniBand hardware issues", 12.2, {"efa-missing": 1, "nic-count-short": 1},
           "an adapter gone or missing: fi_info, lspci, NCCL's nic count"),
        _c("InfiniBand other issues", 17.0, "bad-nic", "a degraded path: every multi-node pair with the node is slow"),
    ))

# Not published data: the quirks issue 19 lists, one share each, to measure the gates on them.
FIELD_QUIRKS = FailureMix(
    "quirks",
    "issue 19's list of the field's quirks (not a published mix: equal shares)",
    tuple(_c(k, 1, k, "a quirk of real tools' output (issue 19)") for k in (
        "fabric-unhealthy", "fabric-degraded-bandwidth", "fabric-in-progress", "fabric-insufficient-resources",
        "output-unreadable", "xid-mig", "tool-missing", "nic-count-short", "plugin-beta")))

MIXES: dict[str, FailureMix] = {m.name: m for m in (LLAMA3, CRUSOE, FIELD_QUIRKS)}


def get_mix(name: str) -> FailureMix:
    if name not in MIXES:
        raise ConfigError(f"no failure mix {name!r}", field="mix", expected="one of " + ", ".join(sorted(MIXES)))
    return MIXES[name]


def draw(mix: FailureMix, faulty_nodes: int, seed: int) -> list[tuple[str, str]]:
    """`faulty_nodes` (class, fault kind) pairs drawn by the classes' counts, then the kinds'
    weights: the faults one rollout meets."""
    rng = random.Random(f"{mix.name}/{seed}")
    classes = list(mix.classes)
    picked = rng.choices(classes, weights=[c.count for c in classes], k=faulty_nodes)
    out = []
    for c in picked:
        kinds = sorted(c.kinds)
        out.append((c.name, rng.choices(kinds, weights=[c.kinds[k] for k in kinds])[0]))
    return out
