"""The 1000-GPU `local` pool upgraded from one BOM to another in grey groups on the simulator: at
every group's drain each partition keeps at least its units minus its allowance, and every admitted
node ends on the new digest."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.daytwo.context import open_day_two
from gpufleet.daytwo.upgrade_plan import limits
from gpufleet.daytwo.upgrade_run import Upgrader
from gpufleet.pool.command import free_units
from gpufleet.project import load_project
from tests.rollout.project import make_project


@pytest.mark.slow  # the 1000-GPU pool rolled out and upgraded
def test_the_local_pool_is_upgraded_in_grey_groups_keeping_every_partition_in_service(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project")
    monkeypatch.setenv("GPUFLEET_PROJECT", str(root))
    out = CliRunner().invoke(main, ["--project", str(root), "rollout", "-s", "local"])
    assert out.exit_code == 0, out.output
    text = (root / "images" / "bom.yaml").read_text()
    (root / "previous-bom.yaml").write_text(text)
    (root / "next-bom.yaml").write_text(text.replace('version: "2.27.5"', 'version: "2.27.7"')
                                        .replace('    version: "1.16.0"', '    version: "1.16.3"'))
    stack = root / "stacks" / "Pulumi.local.yaml"
    stack.write_text(stack.read_text().replace("bom: images/bom.yaml", "bom: next-bom.yaml"))
    seen = []
    with open_day_two("local", "upgrade", project=load_project(root)) as d:
        base = free_units(d.plan, d.pool.state())
        allowed = limits(d.plan, d.spec.upgrade)
        admitted = sorted(s for s, n in d.pool.state().nodes.items() if n.state.value == "admitted")
        up = Upgrader(d, on_step=lambda what, g: seen.append((what, free_units(d.plan, d.pool.state()))))
        assert up.start(root / "previous-bom.yaml") is None
        outcome = up.run()
        target = outcome.state.target_digest
    assert not outcome.halted and len(outcome.state.groups) >= 5
    drained = [free for what, free in seen if what == "drained"]
    assert len(drained) == len(outcome.state.groups)
    for free in drained:
        for partition, units in free.items():
            assert units >= base[partition] - allowed[partition], (partition, units, base[partition])
    records = {p.stem: json.loads(p.read_text()) for p in (root / ".gpufleet" / "local" / "records").glob("*.json")}
    assert {records[s]["bom_digest"] for s in admitted} == {target}
    pool = json.loads((root / ".gpufleet" / "local" / "pool.json").read_text())
    assert sorted(s for s, n in pool["nodes"].items() if n["state"] == "admitted") == admitted
