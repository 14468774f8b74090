"""Grey upgrade of the 1000-GPU `local` pool on the simulator against node-by-node upgrading.

Run: `python bench/bench_upgrade.py`. It rolls the `local` stack out in a throwaway project,
points it at a BOM with a newer NCCL and aws-ofi-nccl, and upgrades it with the real orchestrator,
gates and multi-node baselines. Printed:
- modelled: upgrade time on the simulator's clock (its per-stage durations, the same ones the
  rollout's time-to-pool uses): the grey groups one after another, against a sequential
  node-by-node upgrade (every node on its own: configure, preflight, gates, a multi-node pair),
  which is one node gated through the same path on that clock times the node count: arithmetic
  on the model, so the ratio is modelled against modelled and says nothing about this machine;
- counted: units kept in service per partition at every group's drain (the worst moment), against
  the partition's units and its allowance;
- measured: wall time of the upgrade itself and of gating the one node (this machine, 1 run each:
  an upgrade changes the fleet, a second run would measure something else).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from _measure import counted, measured, modelled, timed  # noqa: E402

from click.testing import CliRunner  # noqa: E402

from gpufleet.bom import load_bom  # noqa: E402
from gpufleet.cli import main  # noqa: E402
from gpufleet.daytwo.context import open_day_two  # noqa: E402
from gpufleet.pool.command import free_units  # noqa: E402
from gpufleet.project import load_project  # noqa: E402
from gpufleet.daytwo.upgrade_run import Upgrader  # noqa: E402
from gpufleet.daytwo.upgrade_plan import limits  # noqa: E402
from tests.rollout.project import make_project  # noqa: E402


def main_() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-upgrade-"))
    try:
        root = make_project(tmp / "project")
        os.environ["GPUFLEET_PROJECT"] = str(root)
        out = CliRunner().invoke(main, ["--project", str(root), "rollout", "-s", "local"])
        if out.exit_code != 0:
            raise SystemExit(out.output)
        text = (root / "images" / "bom.yaml").read_text()
        (root / "previous-bom.yaml").write_text(text)
        (root / "next-bom.yaml").write_text(text.replace('version: "2.27.5"', 'version: "2.27.7"')
                                            .replace('    version: "1.16.0"', '    version: "1.16.3"'))
        stack = root / "stacks" / "Pulumi.local.yaml"
        stack.write_text(stack.read_text().replace("bom: images/bom.yaml", "bom: next-bom.yaml"))
        drains: list[dict[str, int]] = []
        with open_day_two("local", "upgrade", project=load_project(root)) as d:
            base = free_units(d.plan, d.pool.state())
            allowed = limits(d.plan, d.spec.upgrade)
            units = {p.name: p.units for p in d.plan.partitions}
            up = Upgrader(d, on_step=lambda what, g: drains.append(free_units(d.plan, d.pool.state()))
                          if what == "drained" else None)
            assert up.start(root / "previous-bom.yaml") is None
            upgrade = timed(up.run)
            outcome = upgrade.result
            groups = outcome.state.groups
            nodes = sum(len(g.slots) for g in groups.values())
            grey = sum(g.seconds for g in groups.values())
            one = next(iter(groups.values())).slots[0]
            gate_one = timed(lambda: up.gate([one], load_bom(d.state_dir / outcome.state.target_bom), "bench-single"))
            single = gate_one.result.seconds
        sequential = single * nodes
        counted(f"grey upgrade of {nodes} nodes ({nodes * 8} GPUs) in {len(groups)} groups "
                f"(blocks per group: {[len(g.blocks) for g in groups.values()]})")
        modelled(f"grey {grey / 3600:.1f} h (the groups' seconds on the simulator's clock); node by node "
                 f"{sequential / 3600:.1f} h = {nodes} nodes x {single:.0f} s (one node gated on the same clock); "
                 f"ratio {sequential / grey:.1f}x, modelled against modelled")
        for p in sorted(units):
            worst = min(f.get(p, 0) for f in drains)
            counted(f"partition {p:<6} units {units[p]:>3}, in service before {base.get(p, 0):>3}, at worst {worst:>3} "
                    f"(allowance {allowed[p]}; node by node: at worst {base.get(p, 0) - 1})")
        measured(f"wall time here: the grey upgrade {upgrade.wall()}; gating the one node {gate_one.wall()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main_()
