"""The bad-config corpus: every broken stack file fails with the exact error and exit code.

Each file under tests/fixtures/bad_stacks/ declares in its header what it expects:
the exit code, the dotted field path and a text the message must contain.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import boto3

import pytest
from click.testing import CliRunner

from botocore.stub import Stubber

from gpufleet import validate_cloud
from gpufleet.cli import main

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_stacks"
CASES = sorted(CORPUS.glob("Pulumi.*.yaml"))


def _expectations(path: Path) -> dict[str, str]:
    found = dict(re.findall(r"^# expect-(\w+): ?(.*)$", path.read_text(), flags=re.M))
    assert {"exit", "field", "text"} <= set(found), f"{path} lacks its expect- header"
    return found


def test_corpus_is_large_enough():
    assert len(CASES) >= 20


def _replayed_clients(answers_file: Path, stubbers: list[Stubber]):
    """Real boto3 clients whose answers come from a file, validated by botocore's Stubber."""
    answers = json.loads(answers_file.read_text())

    def make_clients(region, session=None):
        clients = {}
        for service in validate_cloud.CLIENTS:
            client = boto3.client(service, region_name=region, aws_access_key_id="x", aws_secret_access_key="x")
            stubber = Stubber(client)
            for operation, response in answers.get(service, []):
                stubber.add_response(operation, _dates(response))
            stubber.activate()
            stubbers.append(stubber)
            clients[service] = client
        return clients
    return make_clients


def _dates(value):
    if isinstance(value, dict):
        return {k: (datetime.fromisoformat(v) if k.endswith("Date") else _dates(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates(v) for v in value]
    return value


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name[len("Pulumi."):-len(".yaml")])
def test_bad_stack_fails_with_the_exact_error(path: Path, monkeypatch):
    expect = _expectations(path)
    stack = path.name[len("Pulumi."):-len(".yaml")]
    args = ["validate", "-s", stack, "--stacks-dir", str(CORPUS)]
    stubbers: list[Stubber] = []
    if expect.get("cloud"):
        monkeypatch.setattr(validate_cloud, "make_clients", _replayed_clients(CORPUS / expect["cloud"], stubbers))
        args.append("--cloud")
    result = CliRunner().invoke(main, args)
    for stubber in stubbers:
        stubber.assert_no_pending_responses()
    out = result.output
    assert result.exit_code == int(expect["exit"]), out
    # the line that carries the error names the file, the field and the expectation together
    lines = [ln for ln in out.splitlines() if path.name in ln and expect["text"] in ln]
    assert lines, f"no line names {path.name} and {expect['text']!r}:\n{out}"
    if expect["field"]:
        assert any(f" {expect['field']}: " in ln or f": {expect['field']}:" in ln for ln in lines), out
    assert "Traceback" not in out
