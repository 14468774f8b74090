"""`gpufleet preview --offline`: the summary, JSON, and exit 3 on a mandatory violation."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.policies.evaluate import Violation


def test_preview_json_counts_instances_by_batch():
    result = CliRunner().invoke(main, ["preview", "-s", "dev", "--offline", "--json", "--target-batch", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    # dev's canary holds both nodes (sized for the smoke job's 2): one batch
    assert report["instances_by_batch"] == {"1": 2} and report["deployed_batches"] == 1
    assert report["mandatory_violations"] == 0
    assert (report["schema_version"], report["kind"], report["stack"]) == (2, "preview", "dev")
    assert report["storage"]["deployment_type"] and "deploymentType" not in report["storage"]
    assert {i["type"] for i in report["interfaces"]["p5.48xlarge"]} == {"interface", "efa-only"}


def test_preview_text_and_mandatory_violation_exit_3(monkeypatch):
    import gpufleet.program.preview as preview

    monkeypatch.setattr(preview, "evaluate", lambda regs: [Violation("imdsv2-required", "mandatory", "lt", "IMDSv1")])
    result = CliRunner().invoke(main, ["preview", "-s", "dev", "--offline", "--target-batch", "1"])
    assert result.exit_code == 3, result.output
    assert "[mandatory] imdsv2-required: lt: IMDSv1" in result.output


def test_preview_without_offline_is_a_usage_error():
    assert CliRunner().invoke(main, ["preview", "-s", "dev"]).exit_code == 2
