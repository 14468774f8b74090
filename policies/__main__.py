"""The policy pack entry point: `pulumi preview --policy-pack policies`. The rules live in `gpufleet.policies`."""

import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "infra"  # this repository's gpufleet, installed or not
if PACKAGE_ROOT.is_dir() and str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))

from gpufleet.policies.pack import run_pack  # noqa: E402

run_pack()
