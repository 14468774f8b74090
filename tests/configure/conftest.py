"""Fixtures for node configuration tests (helpers in configure_host.py, fixtures in host_fixtures.py).

CI runs on a fresh machine as root: system packages a test needs are apt-installed by
`ensure_system_packages` when missing; without root those tests skip with the reason.
"""

from __future__ import annotations

from host_fixtures import base_rootfs, collections_dir, dnf_layer  # noqa: F401  (pytest fixtures)
