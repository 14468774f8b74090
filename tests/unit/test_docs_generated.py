"""The generated docs are current (issue 23 item 7): the configuration reference and the stack's
JSON Schema from the pydantic model, the reason-code runbook from the gates' and rollout's source,
and the JSON Schema of each document kind (item 8). Stale, the test names the file and the
command that rewrites it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import yaml

from gpufleet import docs_gen
from gpufleet.spec import ClusterSpec

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def test_no_generated_doc_is_stale():
    stale = docs_gen.stale(DOCS)
    assert not stale, f"stale: {stale}; run `python -m gpufleet.docs_gen --update` and commit docs/"


def test_a_changed_model_makes_the_reference_stale(tmp_path, monkeypatch):
    """The staleness check can fail: a field the model gains is missing from the committed page."""
    for rel, text in docs_gen.generated().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    assert docs_gen.stale(tmp_path) == []
    page = tmp_path / "reference" / "configuration.md"
    page.write_text(page.read_text().replace("| `batchSize` |", "| `batchSizes` |"), encoding="utf-8")
    assert docs_gen.stale(tmp_path) == ["reference/configuration.md"]


def test_the_reference_names_every_key_of_every_concern():
    page = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    for model in docs_gen._models(ClusterSpec)[1:]:
        assert f"## {model.__name__}" in page
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in page, (model.__name__, name)
    assert "| `batchSize` | int | `25` | > 0, <= 100000 | nodes; no cluster has more |" in page


def test_every_shipped_stack_validates_against_the_stack_schema():
    schema = json.loads((DOCS / "reference" / "stack.schema.json").read_text())
    for path in sorted((REPO / "stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(path.read_text())["config"]
        raw = {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpufleet:")}
        jsonschema.validate(raw, schema)


def _covered(code: str, runbook: str) -> bool:
    patterns = re.findall(r"^\| `([^`]+)` \|", runbook, re.M)
    return any(re.fullmatch(re.sub(r"<[^>]+>", "[a-z0-9-]+", re.escape(p).replace(r"\<", "<").replace(r"\>", ">")),
                            code) for p in patterns)


def test_the_runbook_covers_every_code_the_simulated_faults_must_get():
    """The fault catalog names the codes the real gates give each fault (the README's quarantine
    lines: gpu-count, efa-pair-fail, version-nccl ...): each is in the runbook."""
    from gpufleet.sim.faults import EFFECTS

    runbook = (DOCS / "reference" / "reason-codes.md").read_text(encoding="utf-8")
    codes = {c for e in EFFECTS.values() for c in e.reason_codes} | {"efa-pair-fail", "unreachable"}  # pair tests, configure
    assert {"gpu-count", "version-nccl", "xid-79"} <= codes
    missing = sorted(c for c in codes if not _covered(c, runbook))
    assert not missing, missing
    assert "| `gpu-count` | quarantine | <n> GPUs visible, <name> has <gpus> | `gpufleet.gates.checks.gpu:check_gpu_count` " \
           "| reboot → replace → quarantine |" in runbook
