"""Grey upgrade of the 1000-GPU `local` pool on the simulator against node-by-node upgrading.

Run: `python bench/bench_upgrade.py`. It rolls the `local` stack out in a throwaway project,
points it at a BOM with a newer NCCL and aws-ofi-nccl, and upgrades it with the real orchestrator,
gates and multi-node baselines. Printed:
- modelled upgrade time (the simulator's per-stage durations, the same ones the rollout's
  time-to-pool uses): the grey groups one after another, against a sequential node-by-node upgrade
  (every node on its own: configure, preflight, gates, a multi-node pair), measured by gating one
  node through the same path and multiplied by the node count;
- units kept in service per partition at every group's drain (the worst moment), against the
  partition's units and its allowance;
- wall time of the upgrade itself (this machine).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
            started = time.perf_counter()
            assert up.start(root / "previous-bom.yaml") is None
            outcome = up.run()
            wall = time.perf_counter() - started
            groups = outcome.state.groups
            nodes = sum(len(g.slots) for g in groups.values())
            grey = sum(g.seconds for g in groups.values())
            one = next(iter(groups.values())).slots[0]
            single = up.gate([one], load_bom(d.state_dir / outcome.state.target_bom), "bench-single").seconds
        sequential = single * nodes
        print(f"grey upgrade of {nodes} nodes ({nodes * 8} GPUs) in {len(groups)} groups "
              f"(blocks per group: {[len(g.blocks) for g in groups.values()]})")
        print(f"  modelled time: grey {grey / 3600:.1f} h; node by node {sequential / 3600:.1f} h "
              f"({single:.0f} s a node); ratio {sequential / grey:.1f}x")
        for p in sorted(units):
            worst = min(f.get(p, 0) for f in drains)
            print(f"  partition {p:<6} units {units[p]:>3}, in service before {base.get(p, 0):>3}, at worst {worst:>3} "
                  f"(allowance {allowed[p]}; node by node: at worst {base.get(p, 0) - 1})")
        print(f"  wall time of the upgrade here: {wall:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main_()
