"""The bad-config corpus: every broken stack file fails with the exact error and exit code.

Each file under tests/fixtures/bad_stacks/ declares in its header what it expects:
the exit code, the dotted field path and a text the message must contain.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from infra.cli import main

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_stacks"
CASES = sorted(CORPUS.glob("Pulumi.*.yaml"))


def _expectations(path: Path) -> dict[str, str]:
    found = dict(re.findall(r"^# expect-(\w+): ?(.*)$", path.read_text(), flags=re.M))
    assert {"exit", "field", "text"} <= set(found), f"{path} lacks its expect- header"
    return found


def test_corpus_is_large_enough():
    assert len(CASES) >= 20


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name[len("Pulumi."):-len(".yaml")])
def test_bad_stack_fails_with_the_exact_error(path: Path):
    expect = _expectations(path)
    stack = path.name[len("Pulumi."):-len(".yaml")]
    result = CliRunner().invoke(main, ["validate", "-s", stack, "--stacks-dir", str(CORPUS)])
    out = result.output
    assert result.exit_code == int(expect["exit"]), out
    # the line that carries the error names the file, the field and the expectation together
    lines = [ln for ln in out.splitlines() if path.name in ln and expect["text"] in ln]
    assert lines, f"no line names {path.name} and {expect['text']!r}:\n{out}"
    if expect["field"]:
        assert any(f" {expect['field']}: " in ln or f": {expect['field']}:" in ln for ln in lines), out
    assert "Traceback" not in out
