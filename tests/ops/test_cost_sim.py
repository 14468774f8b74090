"""`gpufleet cost -s local` right after the quickstart (`gpufleet init`, `gpufleet rollout -s local`), with
nothing set: the simulated pool's job stream gives GPU-hours per partition and per team, priced from the
shipped Price List snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main

pytestmark = pytest.mark.slow  # a whole quickstart rollout of the `local` stack


def test_cost_after_the_quickstart_has_gpu_hours_per_partition_and_team(tmp_path: Path) -> None:
    root, run = tmp_path / "project", CliRunner()
    assert run.invoke(main, ["init", str(root), "--stack", "local"]).exit_code == 0
    rolled = run.invoke(main, ["--project", str(root), "rollout", "-s", "local"])
    assert rolled.exit_code in (0, 3), rolled.output  # 3: the seeded faults quarantined nodes
    result = run.invoke(main, ["--project", str(root), "cost", "-s", "local", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads((root / "reports" / "local" / "cost.json").read_text())
    assert report["gpu_hours"] > 0 and report["by_partition"] and report["by_team"]
    assert all(g["gpu_hours"] > 0 and g["jobs"] > 0 for g in report["by_partition"] + report["by_team"])
    assert report["cost_usd"] > 0  # the shipped Price List snapshot's p5.48xlarge rate, with its source
    # utilisation too: the stream's seeded levels (no exporter on the simulated pool), a low one found
    assert report["utilisation"].startswith("simulated: the job stream's seeded GPU utilisation")
    assert report["low_util_jobs"] and all(j["util_percent"] < report["low_util_percent"]
                                           for j in report["low_util_jobs"])
    assert report["price"]["usd_per_instance_hour"] == 55.04 and "pricing.us-east-1.amazonaws.com" in report["price"]["source"]
