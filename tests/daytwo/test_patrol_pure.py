"""The patrol's pure parts: selection, the kernel log since the last patrol, the judgement against
the node's own admission busbw, the light command list, and the real collector's extra vars."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from gpufleet.daytwo.collect import AnsiblePatrolCollector
from gpufleet.daytwo.patrol import PATROL_FILES, judge, light_commands, select, since_filter, since_for
from gpufleet.gates import bundle as B
from gpufleet.gates import synth
from gpufleet.gates.settings import GateSettings
from gpufleet.pool.protocol import NodeState, PoolNode, PoolState
from gpufleet.ports import Instance, StageResult
from gpufleet.sim.patrol import restamp

T0 = datetime(2026, 7, 14, 9, 0, tzinfo=timezone.utc)
XID = ("2026-07-14T09:30:00+0000 ip-10-0-0-4 kernel: NVRM: Xid (PCI:0000:83:00): 48, pid='<unknown>', "
       "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer\n")


def settings() -> GateSettings:
    return GateSettings(instance_type="p5.48xlarge", expected_versions=dict(synth.DEFAULT_VERSIONS))


def light_bundle(tmp: Path, kernel_extra: str = "", busbw: float = 480.0) -> B.Bundle:
    node = synth.NodeSpec(slot="n1", instance_type="p5.48xlarge", intra_busbw=busbw)
    files = synth.node_files(node)
    files[B.KERNEL_LOG] += kernel_extra
    keep = {k: v for k, v in files.items() if k in PATROL_FILES}
    B.write_bundle(tmp / "n1", keep, synth.manifest(node, keep, T0))
    return B.read_bundle(tmp / "n1")


def test_select_splits_admitted_nodes_by_busy_and_ignores_the_rest():
    nodes = {"a": PoolNode("a", NodeState.ADMITTED), "b": PoolNode("b", NodeState.ADMITTED, busy=True),
             "c": PoolNode("c", NodeState.QUARANTINED), "d": PoolNode("d", NodeState.PENDING)}
    sel = select(PoolState(nodes=nodes))
    assert sel.idle == ["a"] and sel.busy == ["b"]


def test_since_filter_keeps_new_lines_and_lines_without_a_time():
    text = ("2026-07-14T08:59:59+0000 host kernel: NVRM: Xid (PCI:0000:83:00): 79, old\n" + XID
            + "[Tue Jul 14 09:40:00 2026] NVRM: Xid (PCI:0000:83:00): 74, dmesg style\n")
    kept = since_filter(text, datetime(2026, 7, 14, 9, 0, tzinfo=timezone.utc))
    assert "79, old" not in kept and "48," in kept and "74, dmesg style" in kept
    assert since_filter(text, None) == text


def test_since_is_the_last_patrol_of_the_same_instance_else_the_admission():
    assert since_for(T0, "i-1", "i-1", None) == T0
    admitted = datetime(2026, 7, 14, 8, 0, tzinfo=timezone.utc)
    assert since_for(T0, "i-old", "i-new", admitted) == admitted
    assert since_for(None, None, "i-1", None) is None


def test_judge_passes_a_healthy_node_and_fails_a_new_xid_or_a_regression(tmp_path):
    s = settings()
    healthy = judge(light_bundle(tmp_path / "a"), s, 480.0, 0.05, T0)
    assert healthy.passed and healthy.busbw_gbs == 480.0
    xid = judge(light_bundle(tmp_path / "b", XID), s, 480.0, 0.05, T0)
    assert not xid.passed and xid.reason_code == "xid-48"
    old = judge(light_bundle(tmp_path / "c", XID), s, 480.0, 0.05, datetime(2026, 7, 14, 10, 0, tzinfo=timezone.utc))
    assert old.passed  # seen by an earlier patrol
    slow = judge(light_bundle(tmp_path / "d", busbw=450.0), s, 480.0, 0.05, T0)
    assert not slow.passed and slow.reason_code == "busbw-regressed"  # above the SKU floor, below its own 456
    floor_only = judge(light_bundle(tmp_path / "e", busbw=450.0), s, None, 0.05, T0)
    assert floor_only.passed  # no admission record: the SKU floor is the bar


def test_light_commands_read_the_kernel_log_since_and_run_a_short_all_reduce():
    cmds = {c["name"]: c["cmd"] for c in light_commands(8, T0)}
    assert set(cmds) == set(PATROL_FILES)
    assert "--since '2026-07-14 09:00:00 UTC'" in cmds[B.KERNEL_LOG]
    assert "-b 1G -e 2G" in cmds[B.NCCL_INTRA] and "-g 8" in cmds[B.NCCL_INTRA]
    assert "--since" not in {c["name"]: c["cmd"] for c in light_commands(8, None)}[B.KERNEL_LOG]


def test_the_real_collector_runs_preflight_with_the_light_commands_from_the_oldest_since(tmp_path):
    seen = []

    class Executor:
        def __init__(self, commands):
            self.commands = commands

        def preflight(self, instances, dest):
            seen.append((self.commands, [i.slot for i in instances], dest))
            return StageResult(hosts={})

    def make(commands):
        return Executor(commands)

    c = AnsiblePatrolCollector(make, 8)
    inst = [Instance("a", "i-a", 1, 0, "10.0.0.4"), Instance("b", "i-b", 1, 0, "10.0.0.5")]
    later = datetime(2026, 7, 14, 11, 0, tzinfo=timezone.utc)
    c.collect(inst, {"a": later, "b": T0}, tmp_path)
    kernel = next(x["cmd"] for x in seen[0][0] if x["name"] == B.KERNEL_LOG)
    assert "2026-07-14 09:00:00" in kernel and seen[0][1] == ["a", "b"]
    c.collect(inst, {"a": later, "b": None}, tmp_path)  # a node never patrolled nor admitted: the whole boot
    kernel = next(x["cmd"] for x in seen[1][0] if x["name"] == B.KERNEL_LOG)
    assert "--since" not in kernel


def test_restamp_moves_xid_lines_to_when_the_fault_appeared():
    out = restamp("2026-07-14T08:05:48+0000 h kernel: NVRM: Xid (PCI:0000:83:00): 48, x\nother line\n", T0)
    assert out.startswith("2026-07-14T09:00:00+0000 h kernel: NVRM: Xid") and out.endswith("other line\n")
