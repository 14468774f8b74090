"""The 1000-GPU `local` pool moved to a new image (and the BOM it was built from) by reimage in grey
groups on the simulator: at every group's drain each partition keeps its units minus its
allowance; every admitted node ends on the new AMI and digest; the simulated cloud's ledger shows
exactly one replacement per admitted slot and none elsewhere."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.daytwo.context import open_day_two
from gpufleet.daytwo.upgrade_plan import limits
from gpufleet.daytwo.upgrade_run import Upgrader
from gpufleet.pool.command import free_units
from gpufleet.project import load_project
from tests.rollout.project import make_project

NEW_AMI = "ami-0fedcba9876543210"
pytestmark = pytest.mark.slow  # the 1000-GPU pool rolled out and reimaged, ~10 s


def test_the_local_pool_is_reimaged_in_grey_groups_one_replacement_per_slot(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project")
    monkeypatch.setenv("GPUFLEET_PROJECT", str(root))
    out = CliRunner().invoke(main, ["--project", str(root), "rollout", "-s", "local"])
    assert out.exit_code == 0, out.output
    text = (root / "images" / "bom.yaml").read_text()
    (root / "previous-bom.yaml").write_text(text)
    (root / "next-bom.yaml").write_text(text.replace('version: "2.27.5"', 'version: "2.27.7"')
                                        .replace('    version: "1.16.0"', '    version: "1.16.3"'))
    stack = root / "stacks" / "Pulumi.local.yaml"
    stack.write_text(stack.read_text().replace("bom: images/bom.yaml", f"bom: next-bom.yaml\n    amiId: {NEW_AMI}"))
    seen = []
    with open_day_two("local", "upgrade", project=load_project(root)) as d:
        base = free_units(d.plan, d.pool.state())
        allowed = limits(d.plan, d.spec.upgrade)
        admitted = sorted(s for s, n in d.pool.state().nodes.items() if n.state.value == "admitted")
        up = Upgrader(d, on_step=lambda what, g: seen.append((what, free_units(d.plan, d.pool.state()))))
        assert up.start(root / "previous-bom.yaml") is None
        outcome = up.run()
        target, state = outcome.state.target_digest, outcome.state
    assert not outcome.halted and state.method == "reimage" and len(state.groups) >= 5
    drained = [free for what, free in seen if what == "drained"]
    assert len(drained) == len(state.groups) == len([w for w, _f in seen if w == "reimaged-upgrade"])
    for free in drained:
        for partition, units in free.items():
            assert units >= base[partition] - allowed[partition], (partition, units, base[partition])
    sim = root / ".gpufleet" / "local"
    events = [json.loads(line) for line in (sim / "sim" / "ledger.jsonl").read_text().splitlines()]
    running = {}
    for e in events:
        if e["event"] == "launch":
            running[e["slot"]] = e
    assert {running[s]["ami"] for s in admitted} == {NEW_AMI}
    assert Counter(e["slot"] for e in events if e["event"] == "launch" and e["by"] == "reimage") == Counter(admitted)
    records = {p.stem: json.loads(p.read_text()) for p in (sim / "records").glob("*.json")}
    assert {records[s]["bom_digest"] for s in admitted} == {target}
    assert {s: records[s]["instance_id"] for s in admitted} == {s: running[s]["instance_id"] for s in admitted}
    pool = json.loads((sim / "pool.json").read_text())
    assert sorted(s for s, n in pool["nodes"].items() if n["state"] == "admitted") == admitted
