"""Which slots have instances, which are protected, and which layout changes are refused.

DESIGN section 6. Pure (no Pulumi): the program feeds it the plan's slots, the batch target
and what the stack recorded at its last deployment (its `deployedSlots` output); Hypothesis
drives it with random layouts in tests/infra/test_staging_property.py.

Why slot names and not batch counts: `rollout.batchSize`, `canaryFraction`, `cluster.unitGpus`,
`targetGpus` and `spareFraction` re-slice the plan. Comparing batch counts, a changed layout
would silently drop deployed instances (`pulumi up` terminates what the program no longer
registers). So the stack records every slot it deployed, with the batch, block and AMI it was
deployed with, and the program:

- keeps every recorded slot the plan still names, with its recorded batch, block and AMI,
  whatever batch the layout now puts it in, as long as either batch is within the target;
- protects every recorded slot (the most recent batch too: its nodes are being gated);
- refuses a change that would remove or rename a recorded slot, or a target below both its
  recorded batch and its planned one, naming the slots and the settings that moved them, unless
  `rollout.allowShrink` (then they are dropped; protected instances must be unprotected first);
- creates the plan's slots up to the target that are not recorded yet;
- boots a slot named in `image.slotAmis` from its override: a deployed one whose recorded AMI
  differs is the only kind of instance left unprotected, to be replaced (`Staging.with_images`).

A missing target means "what the stack last deployed", so a plain `pulumi up` never shrinks
the fleet and a fresh stack creates no instances until the rollout raises the target. A stack
deployed before `deployedSlots` existed only has `deployedBatches`: its slots are taken to be
the current plan's batches up to that count (upgrade with the layout unchanged first).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from gpufleet.errors import ConfigError
from gpufleet.plan.model import NodeSlot
from gpufleet.plan.topology import slot_name
from gpufleet.spec import ClusterSpec

SLOTS_OUTPUT = "deployedSlots"
DEPLOYED_OUTPUT = "deployedBatches"  # kept: the preview shows it and stacks deployed before deployedSlots have only it
LEGACY_IMAGES_OUTPUT = "batchImages"  # read only, from stacks deployed before deployedSlots: {batch: AMI id}
SLOTS_FORMAT = 1
FROZEN_PROPERTIES = ["ami", "user_data", "launch_template"]
REIMAGE_PROPERTIES = ("ami", "launch_template")  # what a reimaged slot takes from the program again
SLOT_AMIS_FIELD = "gpufleet:image.slotAmis"
SHRINK_ADVICE = ("rollout.allowShrink: true, after `pulumi state unprotect` of those instances; "
                 "or restore the settings they were deployed with")


@dataclass(frozen=True, order=True)
class SlotRecord:
    """One deployed slot as the stack recorded it (the name follows from cluster, block, index)."""

    index: int
    block: int
    batch: int
    ami: str | None = None  # None: deployed before AMIs were recorded per slot


@dataclass(frozen=True)
class Deployment:
    """What a stack last deployed: its slots, the batch target, and the settings that laid them out."""

    cluster: str
    batches: int
    slots: tuple[SlotRecord, ...] = ()
    layout: Mapping[str, Any] | None = None  # None: a legacy stack (only deployedBatches was recorded)

    def name(self, slot: SlotRecord) -> str:
        return slot_name(self.cluster, slot.block, slot.index)


@dataclass(frozen=True)
class StagedSlot:
    """A slot that has an instance after this update. `existing`: recorded, so protected and frozen.

    `reimage`: an existing slot whose `image.slotAmis` override names another AMI than the one it
    was deployed with. Only such a slot is unprotected and lets its image and launch template
    change, so the engine replaces its instance (deleting first: a reserved or capacity-block
    fleet has no room for a second instance); every other slot stays frozen as it was."""

    name: str
    index: int
    block: int
    batch: int
    existing: bool
    ami: str | None = None  # recorded AMI of an existing slot, or its override; None: the stack's current one
    reimage: bool = False

    @property
    def protected(self) -> bool:
        return self.existing and not self.reimage

    @property
    def frozen_properties(self) -> list[str] | None:
        """The instance properties the engine must not diff (`ignore_changes`)."""
        if not self.existing:
            return None
        return [p for p in FROZEN_PROPERTIES if p not in REIMAGE_PROPERTIES] if self.reimage else FROZEN_PROPERTIES


@dataclass(frozen=True)
class Staging:
    active: int  # the batch target in force: plan batches 1..active have instances
    slots: tuple[StagedSlot, ...]  # by node index
    dropped: tuple[str, ...] = ()  # recorded slots removed because rollout.allowShrink said so

    def deployment(self, cluster: str, layout: Mapping[str, Any], current_ami: str | None) -> Deployment:
        """What to record for the next update: every slot that has an instance after this one."""
        return Deployment(cluster=cluster, batches=self.active, layout=dict(layout), slots=tuple(
            SlotRecord(index=s.index, block=s.block, batch=s.batch,
                       ami=s.ami if s.existing or s.ami is not None else current_ami)
            for s in self.slots))

    def with_images(self, overrides: Mapping[str, str], plan_slots: Sequence[NodeSlot]) -> "Staging":
        """Apply `image.slotAmis`: each named slot boots its override AMI; a deployed slot whose
        recorded AMI differs is marked for reimage. A name outside the plan is refused (a typo
        would otherwise leave the slot on its old image without a word)."""
        planned = {s.name for s in plan_slots}
        unknown = sorted(set(overrides) - planned)
        if unknown:
            raise ConfigError(f"image.slotAmis names {len(unknown)} slot(s) that are not in the plan: "
                              f"{', '.join(unknown[:5])}", field=f"{SLOT_AMIS_FIELD}.{unknown[0]}",
                              expected=f"slot names of this stack's plan, such as {plan_slots[0].name}"
                              if plan_slots else "slot names of this stack's plan")
        slots = tuple(s if s.name not in overrides else
                      replace(s, ami=overrides[s.name], reimage=s.existing and s.ami != overrides[s.name])
                      for s in self.slots)
        return replace(self, slots=slots)


def layout_settings(spec: ClusterSpec) -> dict[str, Any]:
    """The settings that decide slot names and batches, keyed by their `gpufleet:` config path."""
    c, r = spec.cluster, spec.rollout
    return {"cluster.name": c.name, "cluster.instanceType": c.instance_type, "cluster.targetGpus": c.target_gpus,
            "cluster.unitGpus": c.unit_gpus, "cluster.spareFraction": c.spare_fraction,
            "rollout.canaryFraction": r.canary_fraction, "rollout.batchSize": r.batch_size}


def resolve_staging(plan_slots: Sequence[NodeSlot], plan_batches: int, target: int | None,
                    recorded: Deployment | None, allow_shrink: bool,
                    layout: Mapping[str, Any] | None = None, released_by_rollout: bool = False) -> Staging:
    """Decide which slots have instances after this update (see the module docstring).

    `released_by_rollout`: the plan is the rollout's own resized layout (`gpufleet:rollout.layout`),
    so a recorded slot it no longer names is one a shrink released: the rollout terminated its
    instance and took it out of the state first, and the slot is dropped without allowShrink."""
    recorded = recorded or Deployment(cluster="", batches=0)
    active = min(recorded.batches if target is None else target, plan_batches)
    planned = {s.name: s for s in plan_slots}
    kept: list[StagedSlot] = []
    refused: list[SlotRecord] = []
    released: list[SlotRecord] = []
    for r in recorded.slots:
        name = recorded.name(r)
        # Within the target by its recorded batch or by the one the layout now gives it: keep. Never
        # drop a slot the plan would create again in this same update (that would replace the instance).
        if name in planned and min(r.batch, planned[name].batch) <= active:
            kept.append(StagedSlot(name=name, index=r.index, block=r.block, batch=r.batch, existing=True, ami=r.ami))
        elif name not in planned and released_by_rollout:
            released.append(r)
        else:
            refused.append(r)
    if refused and not allow_shrink:
        raise ConfigError(_refusal(recorded, refused, planned, target, active, layout),
                          field=", ".join(_moved_settings(recorded, refused, planned, layout)),
                          expected=SHRINK_ADVICE)
    have = {s.name for s in kept}
    new = [StagedSlot(name=s.name, index=s.index, block=s.block, batch=s.batch, existing=False)
           for s in plan_slots if s.batch <= active and s.name not in have]
    return Staging(active=active, slots=tuple(sorted(kept + new, key=lambda s: s.index)),
                   dropped=tuple(recorded.name(r) for r in refused + released))


def legacy_deployment(cluster: str, batches: int, plan_slots: Sequence[NodeSlot],
                      images: Mapping[str, str]) -> Deployment:
    """A stack that recorded only `deployedBatches` (and `batchImages`): the plan's batches 1..N."""
    return Deployment(cluster=cluster, batches=batches, layout=None, slots=tuple(
        SlotRecord(index=s.index, block=s.block, batch=s.batch, ami=images.get(str(s.batch)))
        for s in plan_slots if s.batch <= batches))


def _moved_settings(recorded: Deployment, refused: Sequence[SlotRecord], planned: Mapping[str, NodeSlot],
                    layout: Mapping[str, Any] | None) -> list[str]:
    """The config paths that explain the refusal: the target, and the layout settings that changed."""
    out = []
    if any(recorded.name(r) in planned for r in refused):
        out.append("gpufleet:rollout.targetBatch")
    if any(recorded.name(r) not in planned for r in refused):
        changed = [k for k in (layout or {}) if recorded.layout is not None and recorded.layout.get(k) != layout[k]]
        out += [f"gpufleet:{k}" for k in changed] or ["gpufleet:cluster"]
    return out


def _refusal(recorded: Deployment, refused: Sequence[SlotRecord], planned: Mapping[str, NodeSlot],
             target: int | None, active: int, layout: Mapping[str, Any] | None) -> str:
    gone = [r for r in refused if recorded.name(r) not in planned]
    above = [r for r in refused if recorded.name(r) in planned]
    parts = []
    if gone:
        old = recorded.layout or {}
        changed = [f"{k} {old.get(k)!r} -> {layout[k]!r}" for k in (layout or {})
                   if recorded.layout is not None and old.get(k) != layout[k]]
        why = ("the layout changed: " + ", ".join(changed)) if changed else "the plan no longer names them"
        parts.append(f"{len(gone)} deployed slot(s) {compact_names(recorded.cluster, gone)} would be removed or "
                     f"renamed ({why})")
    if above:
        parts.append(f"{len(above)} deployed slot(s) {compact_names(recorded.cluster, above)} are in batches above "
                     f"targetBatch {target if target is not None else 'unset'} (in force: {active}; "
                     f"deployed up to batch {recorded.batches})")
    return "; ".join(parts) + f" (output {SLOTS_OUTPUT})"


def compact_names(cluster: str, slots: Iterable[SlotRecord], limit: int = 6) -> str:
    """`c-b0001-n00005..00009, c-b0002-n00012..b0004-n00020`: consecutive nodes as one range."""
    shown = []
    for run in _runs(sorted(slots), key=lambda r: ()):
        first, last = run[0], run[-1]
        name = slot_name(cluster, first.block, first.index)
        if first is last:
            shown.append(name)
            continue
        tail = slot_name(cluster, last.block, last.index)[len(cluster) + 1:]  # b0004-n00020
        shown.append(f"{name}..{tail.split('-n', 1)[1] if last.block == first.block else tail}")
    more = f" and {len(shown) - limit} more range(s)" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def _runs(slots: Sequence[SlotRecord], key) -> list[list[SlotRecord]]:
    """Maximal runs of consecutive node indexes sharing `key(slot)`."""
    runs: list[list[SlotRecord]] = []
    for s in slots:
        if runs and runs[-1][-1].index + 1 == s.index and key(runs[-1][-1]) == key(s):
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


# --- the `deployedSlots` output --------------------------------------------------------------

def encode_deployment(d: Deployment) -> dict[str, Any]:
    """Compact JSON: runs of consecutive nodes sharing block, batch and AMI, AMIs in one table.

    1,250 nodes in blocks of 5 give at most 250 runs: a few kilobytes of stack output.
    """
    amis = sorted({s.ami for s in d.slots if s.ami is not None})
    ami_ref = {a: i for i, a in enumerate(amis)}
    runs = [[rs[0].block, rs[0].batch, rs[0].index, rs[-1].index, ami_ref.get(rs[0].ami, -1)]  # type: ignore[arg-type]
            for rs in _runs(sorted(d.slots), key=lambda r: (r.block, r.batch, r.ami))]
    return {"format": SLOTS_FORMAT, "cluster": d.cluster, "batches": d.batches, "layout": dict(d.layout or {}),
            "amis": amis, "runs": runs}


def decode_deployment(value: Any) -> Deployment:
    """The inverse of `encode_deployment`; a malformed output is a ConfigError naming it."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"stack output {SLOTS_OUTPUT} is malformed: {why}", field=SLOTS_OUTPUT,
                           expected=f"the format-{SLOTS_FORMAT} object this program writes")
    if not isinstance(value, Mapping) or value.get("format") != SLOTS_FORMAT:
        raise bad(f"format {value.get('format') if isinstance(value, Mapping) else type(value).__name__!r}")
    try:
        cluster, batches, amis = str(value["cluster"]), int(value["batches"]), [str(a) for a in value["amis"]]
        slots: list[SlotRecord] = []
        for block, batch, first, last, ami in value["runs"]:
            if not 0 <= int(first) <= int(last) or not -1 <= int(ami) < len(amis):
                raise bad(f"run {[block, batch, first, last, ami]}")
            slots += [SlotRecord(index=i, block=int(block), batch=int(batch), ami=amis[int(ami)] if ami >= 0 else None)
                      for i in range(int(first), int(last) + 1)]
        # Stack outputs travel as JSON numbers (doubles): 8 comes back 8.0; show it as the user wrote it.
        layout = {str(k): int(v) if isinstance(v, float) and v.is_integer() else v
                  for k, v in (value.get("layout") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"{type(exc).__name__}: {exc}") from None
    if len({s.index for s in slots}) != len(slots):
        raise bad("a node index appears twice")
    return Deployment(cluster=cluster, batches=batches, slots=tuple(sorted(slots)), layout=layout)
