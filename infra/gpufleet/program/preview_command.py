"""The `gpufleet preview` click command (registered in infra/gpufleet/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpufleet.errors import UsageError


@click.command()
@click.option("-s", "--stack", required=True, help="Stack name: stacks/Pulumi.<stack>.yaml")
@click.option("--stacks-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder of stack files (default: the project's stacks/)")
@click.option("--offline", is_flag=True, help="Run the program under Pulumi mocks (no CLI, no credentials).")
@click.option("--target-batch", type=click.IntRange(min=0), default=None,
              help="Preview with gpufleet:rollout.targetBatch set to N (default: all batches).")
@click.option("--json", "as_json", is_flag=True, help="Print the preview as JSON.")
def preview(stack: str, stacks_dir: Path | None, offline: bool, target_batch: int | None, as_json: bool) -> None:
    """Show the resources `pulumi up` would create and the policy verdicts. Exit 3 on a mandatory violation."""
    from gpufleet import spec as spec_mod
    from gpufleet.program.preview import gate, render_text, run_preview

    if not offline:
        raise UsageError("only --offline is implemented here; a live preview is `pulumi preview --policy-pack policies`")
    spec = spec_mod.load_stack(stack, stacks_dir)  # None: the current project's stackConfigDir
    # A fresh stack has no instances until targetBatch rises; default the preview to the whole fleet.
    batches = target_batch if target_batch is not None else (spec.rollout.target_batch or 100_000)
    report = run_preview(spec, stack, target_batch=batches)
    click.echo(json.dumps(report, indent=2) if as_json else render_text(report))
    gate(report)
