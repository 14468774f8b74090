"""Pulumi entry point: load the stack's spec, plan it, build the components, export. No logic."""

import pulumi

from infra.cloud.program import build_cluster
from infra.plan import build_plan
from infra.spec import load_from_pulumi_config

spec = load_from_pulumi_config()
cluster = build_cluster(spec, build_plan(spec))
for key, value in cluster.outputs().items():
    pulumi.export(key, value)
