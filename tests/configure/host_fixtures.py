"""Session fixtures for tests that need node roots: the cached Debian base, the AL2023 layer and
the Ansible collections. A plugin module, so that tests outside tests/configure (the rehearsal)
share them: a conftest imports the names it needs."""

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
    from gpufleet.configure.collections import ensure_collections
    return ensure_collections()


@pytest.fixture(scope="session")
def dnf_layer(base_rootfs) -> Path:
    """The cached AL2023 look-alike layer (dnf, rpm) over `base_rootfs` (rpm_fixture_repo.py)."""
    from rpm_fixture_repo import build_dnf_layer
    return build_dnf_layer(base_rootfs)
