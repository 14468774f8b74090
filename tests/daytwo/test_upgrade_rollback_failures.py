"""A rollback that cannot happen says so before it drains anything, or stops and names the package.

An unreadable, damaged or missing previous BOM is found before any node of a group is drained
(exit 2, naming the file): a rollback that found out after the drain would leave the group
quarantined. A downgrade the nodes refuse (a pin the package repository no longer has) stops the
rollback at that group, which ends quarantined with the package named, and leaves the groups before
it upgraded (exit 3); the configure failure is the one the real role printed on the Debian root
(tests/daytwo/fixtures/configure/apt_pin_missing_from_repo.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.bom import load_bom
from gpufleet.ports import HostOutcome, HostStatus, StageResult
from gpufleet.sim.executor import SimExecutor
from tests.daytwo.fleet import STACK, daytwo_events, gpufleet, pool_doc, state_dir
from tests.daytwo.test_upgrade import digests, retarget

CAPTURE = json.loads((Path(__file__).parent / "fixtures" / "configure" / "apt_pin_missing_from_repo.json").read_text())


@pytest.fixture(autouse=True)
def _project_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_PROJECT", str(tmp_path / "project"))


def _upgraded(fleet: Path) -> Path:
    """The fleet upgraded to NCCL 2.27.7; returns the kept previous BOM the rollback would reinstall."""
    retarget(fleet)
    out = gpufleet(fleet, "upgrade", "-s", STACK, "--previous-bom", str(fleet / "previous-bom.yaml"))
    assert out.exit_code == 0, out.output
    started = next(e for e in daytwo_events(fleet) if e.get("to") == "started")
    (kept,) = started["previous"].values()
    return state_dir(fleet) / kept


@pytest.mark.parametrize("damage", ["garbled", "edited", "deleted"])
def test_a_rollback_whose_previous_bom_is_unreadable_stops_before_draining_naming_the_file(fleet, damage):
    kept = _upgraded(fleet)
    if damage == "garbled":
        kept.write_text("components: [nccl: {version: \n")
    elif damage == "edited":
        kept.write_text(kept.read_text().replace('version: "2.27.5"', 'version: "2.27.6"'))
    else:
        kept.unlink()
    before, events = pool_doc(fleet), len(daytwo_events(fleet))
    out = gpufleet(fleet, "upgrade", "-s", STACK, "--rollback")
    assert out.exit_code == 2, out.output
    assert str(kept) in out.output and "no node was drained" in out.output, out.output
    assert pool_doc(fleet) == before  # nothing drained, nothing moved
    assert len(daytwo_events(fleet)) == events  # not even a rollback-started


def test_a_downgrade_the_nodes_refuse_stops_the_rollback_at_that_group_naming_the_package(fleet, monkeypatch):
    _upgraded(fleet)
    after_upgrade = digests(fleet)
    older = load_bom(fleet / "previous-bom.yaml")
    version = older.component_versions("ubuntu-22.04")["nccl"]
    message = CAPTURE["message"].replace(CAPTURE["missing_version"], version)  # the same refusal, this BOM's pin
    real = SimExecutor.configure

    def configure(self, instances):
        if self.bom is None or self.bom.digest() != older.digest():
            return real(self, instances)
        return StageResult(hosts={i.slot: HostOutcome(slot=i.slot, status=HostStatus.FAILED, task=CAPTURE["task"],
                                                      message=message, duration_s=60.0) for i in instances},
                           duration_s=60.0)

    monkeypatch.setattr(SimExecutor, "configure", configure)
    out = gpufleet(fleet, "upgrade", "-s", STACK, "--rollback")
    assert out.exit_code == 3, out.output
    assert "rollback of group" in out.output and f"libnccl2={version}" in out.output, out.output
    ups = [e for e in daytwo_events(fleet) if e["type"] == "upgrade"]
    (rolled,) = [e for e in ups if e["to"] == "group-rolled-back"]  # one group tried, then the rollback stopped
    assert rolled["records"] == {} and rolled["failed"]
    assert all(f"libnccl2={version}" in f["reason"] for f in rolled["failed"].values())
    nodes = pool_doc(fleet)["nodes"]
    for slot in rolled["failed"]:
        assert nodes[slot]["state"] in ("quarantined", "blacklisted") and f"libnccl2={version}" in nodes[slot]["reason"]
    untouched = set(after_upgrade) - set(rolled["failed"])
    assert untouched and all(digests(fleet)[s] == after_upgrade[s] for s in untouched)  # earlier groups stay upgraded
