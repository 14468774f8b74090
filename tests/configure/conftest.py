"""Fixtures for node configuration tests (helpers in configure_host.py).

CI runs on a fresh machine as root: system packages a test needs are apt-installed by
`ensure_system_packages` when missing; without root those tests skip with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from configure_host import build_base_rootfs, require_root


@pytest.fixture(scope="session")
def base_rootfs() -> Path:
    require_root("a debootstrap chroot")
    return build_base_rootfs()


@pytest.fixture(scope="session")
def collections_dir() -> Path:
    from infra.configure.collections import ensure_collections
    return ensure_collections()


@pytest.fixture(scope="session")
def dnf_layer(base_rootfs) -> Path:
    """The cached AL2023 look-alike layer (dnf, rpm) over `base_rootfs` (rpm_fixture_repo.py)."""
    from rpm_fixture_repo import build_dnf_layer
    return build_dnf_layer(base_rootfs)
