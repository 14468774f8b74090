"""`gpufleet gate DIR`: gate every bundle folder in DIR; print verdicts; write records + JUnit.

Exit codes (DESIGN.md section 8): 0 all admitted or retest, 3 any node quarantined
(`GateFailed`), 2 a missing or invalid DIR or options file (`ConfigError`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import click
import yaml

from infra.errors import ConfigError, GateFailed


def _load_versions(path: Path) -> dict[str, str]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the BOM versions: {exc}", path=str(path)) from None
    if not isinstance(raw, dict) or not all(isinstance(v, (str, int, float)) for v in raw.values()):
        raise ConfigError("must be a mapping of version key -> version string", path=str(path),
                          expected="e.g. {nvidia_driver: '535.183.01', nccl: '2.21.5'}")
    return {str(k): str(v) for k, v in raw.items()}


def _digest(versions: dict[str, str]) -> str:
    if not versions:
        return "none"
    return "sha256:" + hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()


@click.command("gate")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--instance-type", default=None, help="Instance type (default: each manifest's, else p5.48xlarge).")
@click.option("--bom-versions", "bom_versions", type=click.Path(path_type=Path), default=None,
              help="JSON/YAML mapping of expected versions (nvidia_driver, cuda, nccl, ...).")
@click.option("--dcgm-level", type=click.IntRange(1, 4), default=2, show_default=True)
@click.option("--no-lustre", is_flag=True, help="The stack has no Lustre file system.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write one admission record per node and junit.xml here.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
def gate(directory: Path, instance_type: str | None, bom_versions: Path | None, dcgm_level: int, no_lustre: bool,
         out_dir: Path | None, as_json: bool) -> None:
    """Gate every node bundle in DIRECTORY (raw tool outputs + manifest.json)."""
    from infra import catalog
    from infra.gates import bundle as B, junit
    from infra.gates.evaluate import gate_cohort
    from infra.gates.settings import GateSettings
    from infra.gates.verdict import Action

    if not directory.is_dir():
        raise ConfigError("not a folder of bundles", path=str(directory), expected="an existing directory")
    if instance_type is not None:
        try:
            catalog.get(instance_type)
        except KeyError as exc:
            raise ConfigError(str(exc.args[0]), field="--instance-type") from None
    versions = _load_versions(bom_versions) if bom_versions else {}
    folders = B.find_bundles(directory)
    if not folders:
        raise ConfigError("holds no node bundle (a folder with manifest.json or known bundle files)",
                          path=str(directory))
    bundles = []
    for f in folders:
        try:
            bundles.append(B.read_bundle(f))
        except B.BundleError as exc:
            raise ConfigError(str(exc), path=str(f)) from None
    for b in bundles:
        if b.manifest.instance_type and instance_type is None:
            try:
                catalog.get(b.manifest.instance_type)
            except KeyError as exc:
                raise ConfigError(str(exc.args[0]), path=str(Path(b.path) / B.MANIFEST), field="instance_type") from None
    base = GateSettings(expected_versions=versions, bom_digest=_digest(versions), dcgm_level=dcgm_level,
                        expect_lustre=not no_lustre)
    records = gate_cohort(bundles, base, instance_type)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for r in records:
            (out_dir / f"{r.slot}.json").write_text(r.model_dump_json(indent=2), encoding="utf-8")
        (out_dir / "junit.xml").write_text(junit.render(records), encoding="utf-8")
    if as_json:
        click.echo(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
    else:
        for r in records:
            codes = ",".join(r.reason_codes)
            click.echo(f"{r.slot:<24} {r.verdict.value:<10} {r.action.value:<10} {codes}")
        counts = {a: sum(1 for r in records if r.action is a) for a in Action}
        click.echo(f"{len(records)} node(s): {counts[Action.ADMIT]} admit, {counts[Action.RETEST]} retest, "
                   f"{counts[Action.QUARANTINE]} quarantine")
    bad = [r.slot for r in records if r.action is Action.QUARANTINE]
    if bad:
        raise GateFailed(f"{len(bad)} node(s) quarantined: {', '.join(bad[:10])}{' ...' if len(bad) > 10 else ''}")
