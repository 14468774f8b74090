"""`rules.RULES` as pulumi_policy policies (building them does not start the pack)."""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy, StackValidationPolicy

from gpufleet.policies.rules import MANDATORY, RULES, Rule, StackResource

LEVELS = {MANDATORY: EnforcementLevel.MANDATORY, "advisory": EnforcementLevel.ADVISORY}


def _resource_policy(rule: Rule) -> ResourceValidationPolicy:
    def validate(args, report_violation) -> None:
        for message in rule.resource(args.resource_type, args.props):  # type: ignore[misc]
            report_violation(message)
    return ResourceValidationPolicy(name=rule.name, description=rule.description, validate=validate,
                                    enforcement_level=LEVELS[rule.level])


def _stack_policy(rule: Rule) -> StackValidationPolicy:
    def validate(args, report_violation) -> None:
        resources = [StackResource(r.resource_type, r.name, r.props) for r in args.resources]
        for message in rule.stack(resources):  # type: ignore[misc]
            report_violation(message)
    return StackValidationPolicy(name=rule.name, description=rule.description, validate=validate,
                                 enforcement_level=LEVELS[rule.level])


def policies() -> list:
    return [_resource_policy(r) if r.resource else _stack_policy(r) for r in RULES]


def run_pack() -> None:
    """Start the pack (what `pulumi preview --policy-pack policies` runs); blocks until the engine is done."""
    PolicyPack(name="gpufleet", policies=policies())
