"""`gpufleet sim inject -s STACK ...`: tell a simulated stack to drift, so `drift` and `audit` can be
tried without AWS (see `gpufleet.sim.drift`). Refused on a real stack.
"""

from __future__ import annotations

import click

from gpufleet.errors import ConfigError, UsageError


@click.group("sim")
def sim() -> None:
    """The simulated stacks (`local`, `local-slurm`): inject drift and skew."""


def _pairs(values: tuple[str, ...], option: str, what: str) -> dict[str, str]:
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{v!r} is not {what}", field=option, expected=f"{what}, e.g. "
                             + ("nccl=2.26.5" if option == "--skew" else "instanceType=p5e.48xlarge"))
        out[key] = value
    return out


@sim.command("inject")
@click.option("-s", "--stack", required=True, help="A simulated stack (one with a gpufleet:simulator key).")
@click.option("--slot", "slots", multiple=True, help="The node(s) to change (repeatable).")
@click.option("--skew", multiple=True, help="COMPONENT=VERSION the node(s) run instead of the BOM's (repeatable).")
@click.option("--no-facts", is_flag=True, help="The node(s) stop answering: their facts cannot be collected.")
@click.option("--changed-task", "changed", multiple=True, help="A site.yml task check mode finds changed (repeatable).")
@click.option("--cloud-change", "cloud", multiple=True,
              help="FIELD=VALUE of the node's instance as the cloud now has it, e.g. instanceType=p5e.48xlarge.")
@click.option("--orphans", type=click.IntRange(0), default=0, help="Instances tagged for the stack, not in its state.")
@click.option("--clear", is_flag=True, help="Forget every injection first.")
def inject(stack: str, slots: tuple[str, ...], skew: tuple[str, ...], no_facts: bool, changed: tuple[str, ...],
           cloud: tuple[str, ...], orphans: int, clear: bool) -> None:
    """Inject drift into a simulated stack; it stays until --clear."""
    from gpufleet.plan import plan_stack
    from gpufleet.project import current_project
    from gpufleet.sim import drift as sd
    from gpufleet.spec import load_stack_path

    project = current_project()
    spec = load_stack_path(project.stack_file(stack))
    if not spec.simulated:
        raise ConfigError("not a simulated stack", path=str(project.stack_file(stack)), field="gpufleet:simulator",
                          expected="a simulated stack such as local")
    plan = plan_stack(spec)
    skews, changes = _pairs(skew, "--skew", "COMPONENT=VERSION"), _pairs(cloud, "--cloud-change", "FIELD=VALUE")
    if clear:
        sd.clear(project, stack)
    inj = sd.inject(project, stack, plan, slots, skew=skews, no_facts=no_facts, changed=changed, orphans=orphans,
                    cloud=changes, instance_type=plan.instance_type)
    click.echo(f"{stack}: skew on {len(inj.skew)} node(s), {len(set(inj.no_facts))} without facts, "
               f"check-mode changes on {len(inj.changed)}, cloud changes on {len(inj.cloud)}, "
               f"{len(inj.orphans)} orphan instance(s) ({sd.drift_file(project, stack)})")
