"""`gpufleet doctor --json` prints one document in the envelope every JSON has (issue 23 item 8:
it printed a bare list), held to docs/schemas/doctor.schema.json: the host, the BOM and each
difference, the exit code still 4 when anything differs. The node is read by a stand-in for the
playbook run (`read_node`), the outputs in the tools' own formats (tests/configure/test_doctor.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.envelope import HEADER, camel_keys
from tests.configure.test_doctor import GOOD_U, UBUNTU, _node
from tests.rollout.project import make_project

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "schemas" / "doctor.schema.json").read_text())


def _doctor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collected: dict) -> tuple[int, dict]:
    from gpufleet.configure import doctor_command, executor

    project = make_project(tmp_path / "project")
    monkeypatch.setattr(executor, "stack_executor", lambda *a, **k: object())
    monkeypatch.setattr(doctor_command, "read_node", lambda _e, _i, _p, _d, _r: collected)
    r = CliRunner().invoke(main, ["--project", str(project), "doctor", "-s", "local", "--host", "10.0.0.7",
                                  "--connection", "ssh", "--json"])
    assert "Traceback" not in r.output
    doc = json.loads(r.stdout)
    assert list(doc)[:4] == list(HEADER) and (doc["kind"], doc["stack"], doc["schema_version"]) == ("doctor", "local", 1)
    assert not list(camel_keys(doc))
    jsonschema.validate(doc, SCHEMA)
    return r.exit_code, doc


def test_a_node_that_differs_is_one_enveloped_document_and_exit_4(tmp_path, monkeypatch):
    code, doc = _doctor(tmp_path, monkeypatch, _node(UBUNTU, **{**GOOD_U, "loader": ""}))
    assert code == 4
    assert doc["host"] == "10.0.0.7" and doc["ok"] is False
    assert "loader.aws_ofi_nccl" in {d["check"] for d in doc["differences"]}
    assert all(set(d) == {"check", "expected", "found", "source"} for d in doc["differences"])
    # a simulated stack has no outputs: every reachability path is a note in the document, not a pass
    assert "reach.fsx_lustre" in {n["check"] for n in doc["notes"]}, doc["notes"]


def test_the_schema_refuses_the_old_bare_list_and_a_document_without_its_body(tmp_path, monkeypatch):
    _code, doc = _doctor(tmp_path, monkeypatch, _node(UBUNTU, **GOOD_U))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc["differences"], SCHEMA)  # what --json printed before
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in doc.items() if k != "differences"}, SCHEMA)
