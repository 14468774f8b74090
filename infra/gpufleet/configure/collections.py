"""Ansible collections taken out of the PyPI `ansible` wheel, because Galaxy is unreachable.

The `ansible` community package bundles every collection (550 MB installed); we need two:
community.general (the chroot connection, used by tests and image builds) and amazon.aws
(the aws_ssm connection). `pip download` fetches the pinned wheel once; only the needed
collections are unzipped into a versioned folder, which is reused while it exists.
`playbooks/requirements.yml` names the same collections for machines that can reach Galaxy.

The cache is per user, not per project: what it holds depends only on the pinned package
version, a pip-installed gpufleet has no checkout to put it in, and 20 MB of third-party
collections do not belong in a user's project tree. `$GPUFLEET_CACHE_DIR` moves it (CI can
point it at a cached folder); otherwise `$XDG_CACHE_HOME/gpufleet` or `~/.cache/gpufleet`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from gpufleet.errors import ExternalCommandFailed

ANSIBLE_PACKAGE_VERSION = "12.3.0"  # ships community.general 11.x and amazon.aws 10.x
COLLECTIONS = ("community.general", "amazon.aws")
CACHE_ENV = "GPUFLEET_CACHE_DIR"


def default_cache_dir() -> Path:
    """$GPUFLEET_CACHE_DIR, else the XDG user cache: the same answer for every project."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser() / "collections"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpufleet" / "collections"


def collections_path(cache_dir: Path | None = None, version: str = ANSIBLE_PACKAGE_VERSION) -> Path:
    """The folder to put on ANSIBLE_COLLECTIONS_PATH (it holds `ansible_collections/`)."""
    return (cache_dir if cache_dir is not None else default_cache_dir()) / f"ansible-{version}"


def ensure_collections(cache_dir: Path | None = None, version: str = ANSIBLE_PACKAGE_VERSION,
                       names: tuple[str, ...] = COLLECTIONS) -> Path:
    """Return a collections path holding `names`, downloading and extracting only when missing."""
    cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
    dest = collections_path(cache_dir, version)
    missing = [n for n in names if not (dest / "ansible_collections" / Path(*n.split("."))).is_dir()]
    if not missing:
        return dest
    wheel = _download_wheel(cache_dir / "wheels", version)
    # The cache is shared by every project and process of the user: extract into a private
    # folder, then move each collection into place unless another process got there first.
    staging = Path(tempfile.mkdtemp(prefix=f"{dest.name}.partial-", dir=cache_dir))
    try:
        prefixes = tuple("ansible_collections/" + n.replace(".", "/") + "/" for n in missing)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(staging, [m for m in zf.namelist() if m.startswith(prefixes)])
        for name in missing:
            rel = Path("ansible_collections", *name.split("."))
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                (staging / rel).rename(target)
            except OSError:
                if not target.is_dir():
                    raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


def _download_wheel(wheel_dir: Path, version: str) -> Path:
    found = sorted(wheel_dir.glob(f"ansible-{version}-py3-none-any.whl"))
    if found:
        return found[0]
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-q", "-d", str(wheel_dir), f"ansible=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(wheel_dir.glob(f"ansible-{version}-py3-none-any.whl"))
    if proc.returncode != 0 or not found:
        raise ExternalCommandFailed("pip download ansible", proc.stderr.strip()[-2000:] or "no wheel")
    return found[0]


if __name__ == "__main__":  # `python -m gpufleet.configure.collections`: warm the cache (CI setup)
    print(ensure_collections())
