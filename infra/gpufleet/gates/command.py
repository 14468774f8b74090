"""`gpufleet gate DIR`: gate every bundle folder in DIR; print verdicts; write records + JUnit.

Versions are compared with a BOM by default (the project's images/bom.yaml, the stack's with
-s, or --bom FILE); --no-versions turns that off. Exit codes (DESIGN.md section 8): 0 all
admitted or retest, 3 any node quarantined (`GateFailed`), 2 a missing or invalid DIR, BOM or
stack (`ConfigError`).
"""

from __future__ import annotations

from pathlib import Path

import click

from gpufleet.errors import ConfigError, GateFailed, UsageError


def _expected_versions(stack: str | None, bom_file: Path | None, no_versions: bool) -> tuple[dict, str | None, str]:
    """(expected versions per node OS, pool type, BOM digest) for this run.

    The BOM: --bom FILE, else the stack's `image.bom` (-s), else the project's images/bom.yaml.
    With a stack, only the stack's node OS is expected and its pool names the agent.
    """
    from gpufleet.bom import load_bom
    from gpufleet.gates import versions
    from gpufleet.project import current_project

    if no_versions:
        if bom_file is not None:
            raise ConfigError("--no-versions and --bom contradict each other", field="--no-versions",
                              expected="one of them")
        return {}, None, "none"
    spec = None
    if stack is not None:
        from gpufleet import spec as spec_mod

        project = current_project()
        spec = spec_mod.load_stack(stack, project.stacks_dir)
        path = bom_file or project.path(spec.image.bom)
    elif bom_file is not None:
        path = bom_file
    else:
        try:
            path = current_project().default_bom
        except ConfigError as exc:
            raise ConfigError(f"no BOM to compare versions with: {exc.message}", field="--bom",
                              expected="run inside a gpufleet project, or pass --bom FILE, -s STACK or "
                                       "--no-versions") from None
    bom = load_bom(path)  # ConfigError naming the file when it is missing or invalid
    only_os = spec.image.os if spec is not None else None
    if only_os is not None and only_os not in bom.os:
        raise ConfigError(f"the BOM pins nothing for the stack's node OS {only_os}", path=str(path),
                          field=f"os.{only_os}", expected="one of " + ", ".join(bom.os))
    pool = spec.pool.type if spec is not None else None
    return versions.expectations_by_os(bom, pool, only_os), pool, bom.digest()


def _stack_workload_image(stack: str | None) -> str | None:
    """The stack's pinned workload image (acceptance.workloadImage), None without a stack or an image."""
    if stack is None:
        return None
    from gpufleet import spec as spec_mod
    from gpufleet.project import current_project

    return spec_mod.load_stack(stack, current_project().stacks_dir).acceptance.workload_image


def _known_instance_type(bundle) -> None:
    """A manifest naming an instance type the catalog does not know cannot be gated (exit 2)."""
    from gpufleet import catalog
    from gpufleet.gates.bundle import MANIFEST

    it = bundle.manifest.instance_type
    if it:
        try:
            catalog.get(it)
        except KeyError as exc:
            raise ConfigError(str(exc.args[0]), path=str(Path(bundle.path) / MANIFEST), field="instance_type") from None


REPORT_JSON = "gate.json"  # the gate report beside the records: no node's record may take its name


def _out_or_report_dir(out_dir: Path | None, report_dir: Path | None) -> Path | None:
    """`--report-dir` is the old name of `--out` (issue 23 item 8: `--out` across commands): it still
    works, with a note on stderr; both naming different folders is a usage error."""
    if report_dir is None:
        return out_dir
    click.echo("gpufleet: warning: gate --report-dir is deprecated; use --out (the same folder)", err=True)
    if out_dir is not None and out_dir != report_dir:
        raise UsageError(f"--out {out_dir} and --report-dir {report_dir} name different folders", field="--report-dir",
                         expected="--out DIR alone (--report-dir is its deprecated name)")
    return report_dir


@click.command("gate")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--instance-type", default=None, help="Instance type (default: each manifest's, else p5.48xlarge).")
@click.option("-s", "--stack", default=None,
              help="Compare with this stack's BOM (image.bom), node OS and pool agent.")
@click.option("--bom", "bom_file", type=click.Path(path_type=Path), default=None,
              help="Compare with this BOM file (default: the stack's, else the project's images/bom.yaml).")
@click.option("--no-versions", is_flag=True, help="Compare no versions with a BOM.")
@click.option("--dcgm-level", type=click.IntRange(1, 4), default=2, show_default=True)
@click.option("--no-lustre", is_flag=True, help="The stack has no Lustre file system.")
@click.option("--workload-image", default=None, metavar="REPO@sha256:DIGEST",
              help="Every node must hold this image and run it with all GPUs (default: the stack's "
                   "acceptance.workloadImage with -s; else no image checks).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write one admission record per node, junit.xml and the gate report here: gate.json "
                   "(the records), gate.md, gate-junit.xml, gate.html.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON (the envelope; `records`).")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Processes that read and check bundles (default: one per CPU; 1: this process only).")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=None, hidden=True,
              help="Deprecated: --out (one flag name per concept across commands).")
def gate(directory: Path, instance_type: str | None, stack: str | None, bom_file: Path | None, no_versions: bool,
         dcgm_level: int, no_lustre: bool, workload_image: str | None, out_dir: Path | None, as_json: bool,
         workers: int | None, report_dir: Path | None) -> None:
    """Gate every node bundle in DIRECTORY (raw tool outputs + manifest.json)."""
    from gpufleet import catalog
    from gpufleet.gates import bundle as B
    from gpufleet.gates.evaluate import gate_folders
    from gpufleet.gates.settings import GateSettings
    from gpufleet.gates.verdict import Action

    if not directory.is_dir():
        raise ConfigError("not a folder of bundles", path=str(directory), expected="an existing directory")
    out_dir = _out_or_report_dir(out_dir, report_dir)
    if instance_type is not None:
        try:
            catalog.get(instance_type)
        except KeyError as exc:
            raise ConfigError(str(exc.args[0]), field="--instance-type") from None
    expected_by_os, pool, digest = _expected_versions(stack, bom_file, no_versions)
    folders = B.find_bundles(directory)
    if not folders:
        raise ConfigError("holds no node bundle (a folder with manifest.json or known bundle files)",
                          path=str(directory))
    image = workload_image or _stack_workload_image(stack)
    if image is not None:
        from gpufleet.gates.image import pinned_digest

        try:
            pinned_digest(image)
        except ValueError as exc:
            raise ConfigError(str(exc), field="--workload-image", expected="repo@sha256:<64 hex>") from None
    base = GateSettings(expected_by_os=expected_by_os, pool=pool, bom_digest=digest, dcgm_level=dcgm_level,
                        expect_lustre=not no_lustre, workload_image=image)
    try:
        records = gate_folders(folders, base, instance_type, workers=workers,
                               validate=None if instance_type else _known_instance_type)
    except B.BundleError as exc:
        raise ConfigError(str(exc)) from None
    if out_dir is not None:
        from gpufleet.reports.gate_document import gate_document, gate_junit
        from gpufleet.reports.write import write_report

        if any(f"{r.slot}.json" == REPORT_JSON for r in records):
            raise ConfigError(f"a node named {REPORT_JSON[:-5]!r}: its admission record would overwrite the gate "
                              f"report's {REPORT_JSON}", path=str(out_dir), field="--out",
                              expected=f"no bundle folder named {REPORT_JSON[:-5]!r}")
        out_dir.mkdir(parents=True, exist_ok=True)
        for r in records:
            (out_dir / f"{r.slot}.json").write_text(r.model_dump_json(indent=2), encoding="utf-8")
        (out_dir / "junit.xml").write_text(gate_junit(records), encoding="utf-8")
        write_report(gate_document(records), records, out_dir, "gate")
    if as_json:
        from gpufleet.envelope import dumps, envelope  # the one JSON style (issue 23 item 8)

        click.echo(dumps(envelope("gate", stack, {"directory": str(directory),
                                                  "records": [r.model_dump(mode="json") for r in records]},
                                  schema_version=1)))
    else:
        for r in records:
            codes = ",".join(r.reason_codes)
            click.echo(f"{r.slot:<24} {r.verdict.value:<10} {r.action.value:<10} {codes}")
        counts = {a: sum(1 for r in records if r.action is a) for a in Action}
        click.echo(f"{len(records)} node(s): {counts[Action.ADMIT]} admit, {counts[Action.RETEST]} retest, "
                   f"{counts[Action.QUARANTINE]} quarantine")
        click.echo(f"workload image: {image}" if image is not None else
                   "workload image: not applicable (no --workload-image, and no acceptance.workloadImage)")
    bad = [r.slot for r in records if r.action is Action.QUARANTINE]
    if bad:
        raise GateFailed(f"{len(bad)} node(s) quarantined: {', '.join(bad[:10])}{' ...' if len(bad) > 10 else ''}")
