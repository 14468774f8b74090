"""The rehearsal builds on the node-configuration test helpers (tests/configure)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "configure"))

from host_fixtures import base_rootfs, collections_dir  # noqa: E402,F401  (pytest fixtures)
