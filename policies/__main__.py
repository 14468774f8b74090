"""The policy pack entry point: `pulumi preview --policy-pack policies`. Builds the pack only."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the pack runs from policies/: find infra/

from pulumi_policy import PolicyPack  # noqa: E402

from policies.pack import policies  # noqa: E402

PolicyPack(name="gpufleet", policies=policies())
