"""The grey upgrade: group by group, drain -> configure with the target BOM -> the rollout's gates
and multi-node baselines -> compare with the group's previous baselines -> re-admit, or roll the
group back to its recorded previous version (gated the same way) and halt.

Why one journaled step at a time (the rollout's rule): every step reads the group's stage from the
day-two journal, does one thing, and journals it before the next, so `--resume` after a crash
continues where the journal says: a drained group is never drained again, a group's previous
version is on record before any of its nodes is touched, and a verdict is journaled before the
pool hears of it. Only one group is ever out of service, and its units are within
`upgrade.maxUnavailableUnits` per partition (`upgrade_plan.plan_groups`).

The change is applied in place (site.yml with the target BOM) or, for nodes whose AMI is not the
stack's pinned `image.amiId` (`upgrade.method`, `gpufleet.daytwo.reimage`), by reimage first: the
slot's instance replaced from the new image through the provisioner, then configured and gated
the same way. A rollback reimages such nodes back to the AMI recorded when their group started.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from gpufleet import bom_record
from gpufleet.bom import Bom, check_compatibility, load_bom, load_compat
from gpufleet.daytwo.context import DayTwo
from gpufleet.daytwo.gating import Verdicts, gate_nodes, launch_kind
from gpufleet.daytwo.lifecycle import partners
from gpufleet.daytwo.reimage import INPLACE, REIMAGE, reimager, stale_images, target_image, unknown_images
from gpufleet.daytwo.state import GroupState, UpgradeState
from gpufleet.daytwo.upgrade_plan import plan_groups
from gpufleet.errors import ConfigError, UsageError
from gpufleet.gates import versions as gate_versions
from gpufleet.gates.admission import AdmissionRecord
from gpufleet.gates.settings import GateSettings
from gpufleet.pool.protocol import Evicting, HasHolders, NodeState, PendingNode
from gpufleet.rollout.run_config import Adapters
from gpufleet.ports import Executor, Instance


@dataclass
class Outcome:
    state: UpgradeState | None
    message: str
    halted: bool = False
    groups_done: list[int] = field(default_factory=list)


@dataclass
class Changes:
    current: dict[str, str]  # admitted slot -> the BOM digest it was gated on
    todo: set[str]  # the slots the upgrade changes
    reimage: list[str]  # of those, the ones whose instance is replaced from `ami`
    ami: str | None
    images: dict[str, str | None]  # slot -> AMI it runs now (when an image is compared at all)


def nothing_message(stack: str, admitted: int, digest: str, ami: str | None) -> str:
    """Why an upgrade has nothing to do: no admitted node yet is not the same as all up to date."""
    if admitted == 0:
        return f"nothing to upgrade: {stack} has no admitted node yet (`gpufleet rollout -s {stack}` admits them)"
    on = f" and image {ami}" if ami is not None else ""
    return f"nothing to upgrade: all {admitted} admitted node(s) already run {digest[:19]}{on}"


def settings_for(d: DayTwo, bom: Bom) -> GateSettings:
    """The gates' expectations for nodes built from `bom` (as `gpufleet.rollout.wiring.gate_settings`)."""
    by_os = gate_versions.expectations_by_os(bom, d.spec.pool.type, d.spec.image.os)
    return GateSettings.from_config(d.spec.gates, d.spec.cluster.instance_type, bom_digest=bom.digest(),
                                    expected_by_os=by_os, pool=d.spec.pool.type,
                                    workload_image=d.spec.acceptance.workload_image)


def executor_for(d: DayTwo, bom: Bom) -> Executor:
    """The stack's executor, configuring `bom` (site.yml with that BOM's versions)."""
    base: Any = d.adapters.executor
    if hasattr(base, "with_bom"):  # the simulator's
        return base.with_bom(bom)
    from gpufleet import catalog
    from gpufleet.configure.executor import AnsibleExecutor
    from gpufleet.configure.extravars import configure_extravars

    if not isinstance(base, AnsibleExecutor):
        raise ConfigError(f"cannot configure another BOM through {type(base).__name__}")
    pins = configure_extravars(bom, d.spec.image.os, catalog.CATALOG[d.spec.cluster.instance_type],
                               region=d.spec.cluster.region)
    return AnsibleExecutor(base.runner, base.connection, {**base.site_vars, **pins}, groups=base.groups,
                           context=base.context, preflight_vars=base.preflight_vars)


def bom_remote(d: DayTwo) -> bom_record.Remote | None:
    """The stack's S3 state, where its kept BOMs are kept too (None for local state)."""
    from gpufleet.rollout.backends import bom_store_for

    return bom_store_for(d.spec.rollout.state_backend, d.stack, d.spec.cluster.region)


def snapshot(d: DayTwo, bom_path: Path) -> tuple[Bom, str]:
    """Keep a BOM on record by digest (`gpufleet.bom_record`): what a rollback reinstalls."""
    bom, dest = bom_record.keep(d.state_dir, bom_path, applied_by=f"upgrade ({d.who})",
                                image=d.spec.image.ami_id, remote=bom_remote(d))
    return bom, str(dest.relative_to(d.state_dir))


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def baselines(records: Sequence[AdmissionRecord], runs: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A group's figures: median intra-node busbw and median multi-node busbw (runs, else the records')."""
    intra = [r.busbw.intra_node_gbs for r in records if r.busbw.intra_node_gbs is not None]
    if runs is None:
        multi = [v for r in records for v in r.busbw.multi_node_gbs.values()]
    else:
        multi = [r["busbw_gbs"] for r in runs if r.get("measured") and r.get("busbw_gbs") is not None]
    return {"intra_node_gbs": _median(intra), "multi_node_gbs": _median(multi), "nodes": len(records)}


def regression(before: dict[str, Any], after: dict[str, Any], fraction: float) -> str:
    """Why the group regressed ('' when it did not): a median more than `fraction` under its previous one."""
    out = []
    for key, label in (("intra_node_gbs", "intra-node"), ("multi_node_gbs", "multi-node")):
        b, a = before.get(key), after.get(key)
        if b and a is not None and a < b * (1 - fraction):
            out.append(f"{label} busbw median {a:g} GB/s is {1 - a / b:.1%} under the group's previous {b:g} "
                       f"(threshold {fraction:.0%})")
    return "; ".join(out)


class Upgrader:
    def __init__(self, d: DayTwo, *, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic, poll_s: float = 10.0,
                 on_step: Callable[[str, GroupState], None] | None = None) -> None:
        self.d, self.sleep, self.monotonic, self.poll_s = d, sleep, monotonic, poll_s
        self.on_step = on_step or (lambda _what, _g: None)  # tests watch the pool at every step
        self.slots = {s.name: s for s in d.plan.nodes}
        self.partition_of_block = {b.id: b.partition for b in d.plan.blocks}

    @property
    def state(self) -> UpgradeState | None:
        return self.d.journal.state.upgrade

    # ------------------------------------------------------------------ planning

    def start(self, previous_bom: Path | None = None) -> Outcome | None:
        """Journal a new upgrade to the stack's current BOM; an Outcome when there is nothing to do.

        Everything that can refuse (compatibility, a previous version not on record, a block larger
        than the partition's allowance) refuses here, before any node is drained."""
        d = self.d
        target_path = d.project.path(d.spec.image.bom)
        target = load_bom(target_path)
        problems = [f for f in check_compatibility(target, d.spec.image.os, load_compat(d.project.default_compat))
                    if f.level.value == "ERROR"]
        if problems:
            raise ConfigError("the BOM breaks the compatibility rules: " + "; ".join(f.render() for f in problems),
                              path=str(target_path), field="components",
                              expected="a BOM that `gpufleet validate` accepts; no node was drained")
        c = self.changes(target)
        current, todo, to_reimage, ami, images = c.current, c.todo, c.reimage, c.ami, c.images
        if not todo:
            return Outcome(None, nothing_message(d.stack, len(current), target.digest(), ami))
        unknown = unknown_images(to_reimage, images)
        if unknown:
            raise ConfigError(f"the image {len(unknown)} node(s) run is not known ({', '.join(unknown[:5])}), so a "
                              "failed group could not be reimaged back to it; no node was drained",
                              field="gpufleet:upgrade.method",
                              expected="inplace, or nodes whose instances the provisioner reports an AMI for")
        previous: dict[str, str] = {}
        given = load_bom(previous_bom) if previous_bom is not None else None
        for digest in sorted({current[s] for s in todo}):
            kept = bom_record.find(d.state_dir, digest, bom_remote(d))  # kept by the rollout or an earlier upgrade
            if kept is not None:
                previous[digest] = str(kept.relative_to(d.state_dir))
            elif digest == target.digest():  # an image-only change: the previous BOM is the target
                previous[digest] = snapshot(d, target_path)[1]
            elif given is not None and given.digest() == digest:
                previous[digest] = snapshot(d, Path(previous_bom))[1]  # type: ignore[arg-type]
            else:
                raise UsageError(f"the BOM the pool runs now ({digest[:19]}) is not on record in "
                                 f"{bom_record.record_path(d.state_dir, digest).parent} (a rollout keeps every BOM it "
                                 "applies; this pool was built before that), so a failed group could not be rolled "
                                 "back to it; no node was drained", field="--previous-bom",
                                 expected="the BOM the pool was rolled out with, e.g. `git show "
                                          "HEAD~1:images/bom.yaml > previous-bom.yaml`")
        groups = plan_groups(d.plan, todo, d.spec.upgrade)
        _bom, target_snap = snapshot(d, target_path)
        d.journal.append({"type": "upgrade", "to": "started", "who": d.who, "target_digest": target.digest(),
                          "target_bom": target_snap, "previous": previous,
                          "method": REIMAGE if to_reimage else INPLACE, "target_ami": ami if to_reimage else None,
                          "groups": [{"number": g.number, "blocks": list(g.blocks), "slots": list(g.slots),
                                      "units": dict(g.units)} for g in groups]})
        return None

    def changes(self, target: Bom) -> "Changes":
        """What an upgrade to `target` (and the stack's image) would change: pure over the pool's
        admitted nodes, their records and the provisioner's images; `--dry-run` shows it."""
        d = self.d
        current: dict[str, str] = {}
        for slot, n in sorted(d.pool.state().nodes.items()):
            if n.state is NodeState.ADMITTED:
                record = d.record(slot)
                if record is None:
                    raise ConfigError(f"admitted node {slot} has no admission record in the journals",
                                      field="journal", expected="an admission record per admitted node")
                current[slot] = record.bom_digest
        ami = target_image(d.spec)
        images = dict(reimager(d.adapters.provisioner).images()) if ami is not None else {}
        to_reimage = stale_images(sorted(current), images, ami) if ami is not None else []
        todo = {s for s, digest in current.items() if digest != target.digest()} | set(to_reimage)
        return Changes(current=current, todo=todo, reimage=to_reimage, ami=ami, images=images)

    # ------------------------------------------------------------------ running

    def run(self) -> Outcome:
        up = self.state
        assert up is not None
        done = []
        for n in sorted(up.groups):
            g = up.groups[n]
            if g.stage == "admitted":
                done.append(n)
                continue
            self._group(g)
            if up.stage != "running":
                return Outcome(up, up.reason, halted=True, groups_done=done)
            done.append(n)
        self.d.journal.append({"type": "upgrade", "to": "finished"})
        return Outcome(up, f"upgraded {sum(len(up.groups[n].slots) for n in done)} node(s) in {len(done)} group(s) "
                           f"to {up.target_digest[:19]}", groups_done=done)

    def _group(self, g: GroupState) -> None:
        d, up = self.d, self.state
        assert up is not None
        if g.stage == "planned":
            prev = {}
            images = self._images()
            for slot in g.slots:
                r = d.record(slot)
                prev[slot] = {"bom_digest": r.bom_digest if r else None, "ami": images.get(slot),
                              "record": r.model_dump(mode="json") if r else None}
            d.journal.append({"type": "upgrade", "to": "group-started", "group": g.number, "previous": prev})
        if g.stage == "started":
            self.previous_boms([g])  # a group whose way back cannot be read is never drained
            holding = self._drain(g.slots)
            if holding:
                self._readmit_previous(g)
                reason = (f"group {g.number}: the drain did not finish within {d.spec.upgrade.drain_timeout_s:g} s; "
                          f"running work holds {', '.join(holding)}; the group's nodes were returned unchanged")
                d.journal.append({"type": "upgrade", "to": "group-halted", "group": g.number, "reason": reason})
                d.journal.append({"type": "upgrade", "to": "halted", "reason": reason})
                return
            d.journal.append({"type": "upgrade", "to": "group-drained", "group": g.number})
            self.on_step("drained", g)
        if g.stage == "drained":
            if up.target_ami is not None:
                stale = [s for s in g.slots if g.previous[s].get("ami") != up.target_ami]
                self._reimage(g, "upgrade", up.target_ami, stale)
            target = load_bom(d.state_dir / up.target_bom)
            before = baselines([AdmissionRecord.model_validate(p["record"]) for p in g.previous.values()
                                if p.get("record")])
            v = self.gate(g.slots, target, f"group-{g.number}")
            after = baselines(list(v.admit.values()), v.runs)
            why = "; ".join(f"{s}: {code}: {reason}" for s, (code, reason, _r) in sorted(v.failed.items()))
            why = why or regression(before, after, d.spec.gates.drift_regression_fraction)
            d.journal.append({"type": "upgrade", "to": "group-gated", "group": g.number,
                              "result": "fail" if why else "pass", "reason": why,
                              "records": {s: r.model_dump(mode="json") for s, r in v.admit.items()},
                              "failed": {s: {"reason_code": c, "reason": m} for s, (c, m, _r) in v.failed.items()},
                              "before": before, "after": after, "seconds": v.seconds})
        if g.stage == "gated":
            if g.result == "pass":
                for slot, raw in sorted(g.records.items()):
                    d.pool.admit(slot, AdmissionRecord.model_validate(raw))
                    d.write_record(raw)
                d.journal.append({"type": "upgrade", "to": "group-admitted", "group": g.number})
                self.on_step("admitted", g)
                return
            self._roll_back(g)
            kind = "the canary group" if g.number == 1 else f"group {g.number}"
            failed = self.state.groups[g.number].failed if self.state is not None else {}
            back = ("was rolled back to its previous version" if not failed else
                    "could not be rolled back on " + "; ".join(f"{s}: {f.get('reason')}" for s, f in sorted(failed.items()))
                    + " (quarantined)")
            d.journal.append({"type": "upgrade", "to": "halted", "reason": f"{kind} failed and {back}: {g.reason}"})

    def _drain(self, slots: Sequence[str]) -> list[str]:
        """Take the nodes out of new work (the pool's pending state: Slurm DRAIN, the gate taint), then
        wait for their running work to end. A pool that can evict (`Evicting`: Kubernetes) also cordons
        them, and evicts what still runs `upgrade.evictAfterS` into the drain; it uncordons them at the
        end, since the gates' own pods must schedule there (the gate taint keeps other work out).
        Returns what still holds the nodes at the `drainTimeoutS` deadline: the holding workloads where
        the pool can name them (`HasHolders`: Kubernetes, Slurm, the simulator), else the busy slots."""
        d, cfg = self.d, self.d.spec.upgrade
        pool = d.pool.state()
        d.pool.register_pending([PendingNode(slot=s, block=self.slots[s].block,
                                             partition=self.partition_of_block.get(self.slots[s].block),
                                             instance_id=pool.nodes[s].instance_id if s in pool.nodes else None)
                                 for s in slots])
        evicting = d.pool if isinstance(d.pool, Evicting) else None
        naming = d.pool if isinstance(d.pool, HasHolders) else None
        start = self.monotonic()
        deadline = start + cfg.drain_timeout_s
        evict_at = start + cfg.eviction_after_s if evicting is not None else None
        if evicting is not None:
            evicting.cordon(slots)
        try:
            while True:
                busy = [s for s in slots if (n := d.pool.state().get(s)) is not None and n.busy]
                if not busy:
                    return []
                now = self.monotonic()
                if evicting is not None and evict_at is not None and evict_at <= now < deadline:
                    evict_at = None
                    evicting.evict(busy, deadline - now)
                    continue
                if now >= deadline:
                    found = naming.holders(busy) if naming is not None else []
                    named = {h.slot for h in found}
                    return [str(h) for h in found] + [s for s in busy if s not in named]  # unnamed: the slot
                self.sleep(self.poll_s)
        finally:
            if evicting is not None:
                evicting.cordon(slots, on=False)

    def _images(self) -> dict[str, str | None]:
        """slot -> AMI of its running instance, when the provisioner can tell (both of ours can)."""
        provisioner = self.d.adapters.provisioner
        return dict(provisioner.images()) if hasattr(provisioner, "images") else {}

    def _reimage(self, g: GroupState, purpose: str, ami: str, slots: Sequence[str]) -> None:
        """Replace `slots`' instances with ones booted from `ami`, journaled as an intent and as done.

        The old instances leave the pool first (they are terminated); the new ones register as
        pending, to be gated like any newcomer. Asked again after a crash, the provisioner
        launches nothing for a slot already on `ami`."""
        d = self.d
        if not slots or g.reimaged(purpose, ami):
            return
        if not g.reimage_requested(purpose, ami):  # a resumed one keeps the instances it meant to replace
            inventory = dict(d.adapters.provisioner.inventory())
            d.journal.append({"type": "upgrade", "to": "reimage-requested", "group": g.number, "purpose": purpose,
                              "ami": ami, "slots": list(slots),
                              "from": {s: inventory[s].instance_id for s in slots if s in inventory}})
        pool = d.pool.state()
        for s in slots:  # a resumed call releases what it registered; the pool keeps the slot's failures
            if pool.get(s) is not None:
                d.pool.release(s)
        result = reimager(d.adapters.provisioner).reimage([self.slots[s] for s in slots], ami)
        d.advance(result.duration_s)
        d.pool.register_pending([PendingNode(slot=s, block=self.slots[s].block,
                                             partition=self.partition_of_block.get(self.slots[s].block),
                                             instance_id=result.instances[s].instance_id,
                                             address=result.instances[s].private_ip) for s in slots])
        d.journal.append({"type": "upgrade", "to": "reimaged", "group": g.number, "purpose": purpose, "ami": ami,
                          "instances": {s: result.instances[s].instance_id for s in slots},
                          "seconds": result.duration_s})
        self.on_step(f"reimaged-{purpose}", g)

    def _instances(self, slots: Sequence[str]) -> list[Instance]:
        inventory = dict(self.d.adapters.provisioner.inventory())
        missing = [s for s in slots if s not in inventory]
        if missing:
            raise ConfigError(f"no running instance for {', '.join(missing[:5])}", field="inventory",
                              expected="every node of an upgrade group running")
        return [inventory[s] for s in slots]

    def gate(self, slots: Sequence[str], bom: Bom, label: str) -> Verdicts:
        """Configure `slots` with `bom` and take them through the rollout's gates and baselines."""
        d = self.d
        ports = Adapters(d.adapters.provisioner, executor_for(d, bom), d.adapters.pool, d.adapters.clock)
        v = gate_nodes(ports, settings_for(d, bom), self._instances(slots), partners(d, set(slots)),
                       d.state_dir / "upgrade" / "bundles" / label, d.stack, kind=launch_kind(d.pool.kind),
                       message_bytes=d.spec.gates.baseline_message_bytes)
        d.advance(v.seconds)
        return v

    def previous_boms(self, groups: Sequence[GroupState]) -> dict[str, Bom]:
        """Each BOM these groups would roll back to, read and checked against its digest now, before
        any of their nodes is drained: an unreadable, damaged or missing copy stops here, naming the
        file (a rollback that found it out after the drain would leave the group quarantined)."""
        d, up = self.d, self.state
        assert up is not None
        out: dict[str, Bom] = {}
        for g in groups:
            for slot, p in sorted(g.previous.items()):
                digest = p.get("bom_digest")
                if digest is None or digest in out:
                    continue
                rel = up.previous.get(digest)
                if rel is None:
                    raise ConfigError(f"group {g.number}'s previous BOM {digest[:19]} (of {slot}) is not in the "
                                      "upgrade's journal; no node was drained", field="previous",
                                      expected="the BOM every node ran when the upgrade started")
                path = d.state_dir / rel
                try:
                    if not path.exists():  # a CI runner that did not start this upgrade: the S3 state has it
                        bom_record.find(d.state_dir, digest, bom_remote(d))
                    bom = load_bom(path)
                except (ConfigError, OSError, ValueError) as exc:
                    raise ConfigError(f"group {g.number}'s previous BOM cannot be read ({exc}); no node was drained",
                                      path=str(path), expected=f"the kept BOM with digest {digest[:19]}") from None
                if bom.digest() != digest:
                    raise ConfigError(f"group {g.number}'s previous BOM hashes to {bom.digest()[:19]}, not the "
                                      f"{digest[:19]} its nodes ran; it was changed after it was kept; no node was "
                                      "drained", path=str(path), expected=f"the kept BOM with digest {digest[:19]}")
                out[digest] = bom
        return out

    def _readmit_previous(self, g: GroupState) -> None:
        for slot, p in sorted(g.previous.items()):
            if p.get("record"):
                self.d.pool.admit(slot, AdmissionRecord.model_validate(p["record"]))

    def _roll_back(self, g: GroupState) -> None:
        """Reinstall each node's previous BOM, gate it the same way, admit (or quarantine) it."""
        d, up = self.d, self.state
        assert up is not None
        images = self._images()
        by_ami: dict[str, list[str]] = {}
        for slot, p in sorted(g.previous.items()):
            if p.get("ami") and images.get(slot) != p["ami"]:
                by_ami.setdefault(p["ami"], []).append(slot)
        for ami, slots in sorted(by_ami.items()):
            self._reimage(g, "rollback", ami, slots)
        by_digest: dict[str, list[str]] = {}
        for slot, p in g.previous.items():
            by_digest.setdefault(p["bom_digest"], []).append(slot)
        records, failed, seconds = {}, {}, 0.0
        boms = self.previous_boms([g])
        for digest, slots in sorted(by_digest.items()):
            bom = boms[digest]
            v = self.gate(sorted(slots), bom, f"group-{g.number}-rollback")
            seconds += v.seconds
            for slot, r in v.admit.items():
                d.pool.admit(slot, r)
                d.write_record(r.model_dump(mode="json"))
                records[slot] = r.model_dump(mode="json")
            for slot, (code, reason, _r) in v.failed.items():
                d.pool.quarantine(slot, code, f"rollback: {reason}")
                failed[slot] = {"reason_code": code, "reason": reason}
        d.journal.append({"type": "upgrade", "to": "group-rolled-back", "group": g.number, "records": records,
                          "failed": failed, "seconds": seconds})
        self.on_step("rolled-back", g)

    def rollback(self) -> Outcome:
        """`--rollback`: every upgraded group back to its recorded previous version, last group first."""
        up = self.state
        if up is None:
            raise UsageError("this stack has no upgrade to roll back", field="--rollback",
                             expected="an upgrade in the day-two journal")
        self.previous_boms([g for g in up.groups.values() if g.stage == "admitted"])  # before any drain
        if up.stage != "rolling-back":
            self.d.journal.append({"type": "upgrade", "to": "rollback-started", "who": self.d.who})
        undone: list[int] = []
        for n in sorted(up.groups, reverse=True):
            g = up.groups[n]
            if g.stage != "admitted":
                continue
            holding = self._drain(g.slots)
            if holding:  # running work outlasted the deadline: the group stays upgraded, rerun to continue
                for slot, raw in sorted(g.records.items()):
                    self.d.pool.admit(slot, AdmissionRecord.model_validate(raw))
                return Outcome(up, f"rollback of group {g.number} held: running work ({', '.join(holding)}) "
                                   f"outlasted {self.d.spec.upgrade.drain_timeout_s:g} s; the group stays upgraded "
                                   "(rerun `gpufleet upgrade --rollback`)", halted=True, groups_done=undone)
            self._roll_back(g)
            undone.append(n)
            failed = self.state.groups[n].failed if self.state is not None else {}
            if failed:  # a downgrade that did not happen (a version gone from the repository): stop here
                why = "; ".join(f"{s}: {f.get('reason_code')}: {f.get('reason')}" for s, f in sorted(failed.items()))
                return Outcome(up, f"rollback of group {n} failed on {len(failed)} node(s), now quarantined ({why}); "
                                   "the groups before it stay upgraded (fix the cause, then rerun "
                                   "`gpufleet upgrade --rollback`)", halted=True, groups_done=undone)
        self.d.journal.append({"type": "upgrade", "to": "rolled-back"})
        return Outcome(up, f"rolled back {len(undone)} group(s) to their previous version", groups_done=undone)

