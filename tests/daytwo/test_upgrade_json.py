"""`gpufleet upgrade --json` when there is nothing to do prints the upgrade document in the envelope
(issue 23 item 8: it printed the text line), held to docs/schemas/upgrade.schema.json: stage "none",
no group, the message, the stack's target BOM; and nothing is drained or journaled."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gpufleet.bom import load_bom
from gpufleet.envelope import HEADER, camel_keys
from tests.daytwo.fleet import STACK, daytwo_events, gpufleet, pool_doc
from tests.rollout.project import make_project

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "upgrade.schema.json").read_text())


@pytest.fixture(autouse=True)
def _project_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_PROJECT", str(tmp_path / "project"))


def _nothing(project: Path) -> dict:
    out = gpufleet(project, "upgrade", "-s", STACK, "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)  # stdout is the document alone
    assert list(doc)[:4] == list(HEADER) and (doc["kind"], doc["stack"]) == ("upgrade", STACK)
    assert isinstance(doc["schema_version"], int) and not list(camel_keys(doc))
    jsonschema.validate(doc, SCHEMA)
    assert (doc["stage"], doc["groups"], doc["halted"]) == ("none", [], False)
    assert doc["target_digest"] == load_bom(project / "images" / "bom.yaml").digest()
    return doc


def test_a_pool_already_on_its_bom_prints_the_envelope_with_nothing_to_do(fleet):
    before = pool_doc(fleet)
    events = len(daytwo_events(fleet))
    doc = _nothing(fleet)
    assert doc["message"].startswith("nothing to upgrade: all 40 admitted node(s) already run")
    assert pool_doc(fleet) == before and len(daytwo_events(fleet)) == events  # nothing drained or journaled
    text = gpufleet(fleet, "upgrade", "-s", STACK)
    assert text.exit_code == 0 and text.output.strip() == doc["message"]  # without --json: the line, as before


def test_before_any_rollout_the_json_says_no_node_is_admitted_yet(tmp_path):
    doc = _nothing(make_project(tmp_path / "project"))
    assert f"{STACK} has no admitted node yet" in doc["message"]
