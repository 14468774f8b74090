"""The .ci scripts the workflow leans on, run for real: `.ci/torch` installs the pinned CPU build
from the index CI names (and nothing without one), `.ci/cache` keeps owners, modes and links."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# a stand-in for .venv/bin/python: `-c` answers the installed torch version (none: exit 1),
# `-m pip ...` records its arguments
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-c" ]; then [ -f "$(dirname "$0")/torch-version" ] && cat "$(dirname "$0")/torch-version" && exit 0; exit 1; fi
echo "$@" >> "$(dirname "$0")/pip-calls"
"""


def _checkout(tmp_path: Path, installed: str | None = None) -> Path:
    """A tree with .ci/torch and a fake venv python."""
    (tmp_path / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "torch", tmp_path / ".ci" / "torch")
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").write_text(FAKE_PYTHON)
    (bin_ / "python").chmod(0o755)
    if installed:
        (bin_ / "torch-version").write_text(installed + "\n")
    return bin_


def _torch(tree: Path, index: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUFLEET_TORCH_INDEX"}
    if index is not None:
        env["GPUFLEET_TORCH_INDEX"] = index
    return subprocess.run(["bash", str(tree / ".ci" / "torch")], env=env, capture_output=True, text=True, timeout=60)


def _pin() -> str:
    return next(line.split("=", 1)[1].split()[0] for line in (ROOT / ".ci" / "torch").read_text().splitlines()
                if line.startswith("TORCH_CPU_VERSION="))


def test_torch_cpu_build_comes_from_the_named_index_pinned(tmp_path: Path) -> None:
    bin_ = _checkout(tmp_path)
    out = _torch(tmp_path, "https://download.pytorch.org/whl/cpu")
    assert out.returncode == 0, out.stderr
    calls = (bin_ / "pip-calls").read_text().splitlines()
    assert len(calls) == 1
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in calls[0]
    assert calls[0].endswith(f"torch=={_pin()}") and _pin().endswith("+cpu")


def test_torch_is_left_alone_without_an_index_or_when_the_pin_is_installed(tmp_path: Path) -> None:
    bin_ = _checkout(tmp_path / "a")
    assert _torch(tmp_path / "a", None).returncode == 0 and _torch(tmp_path / "a", "").returncode == 0
    assert not (bin_ / "pip-calls").exists(), "a machine that reaches only PyPI: the tests install torch"
    bin_ = _checkout(tmp_path / "b", installed=_pin())
    assert _torch(tmp_path / "b", "https://download.pytorch.org/whl/cpu").returncode == 0
    assert not (bin_ / "pip-calls").exists()
    bin_ = _checkout(tmp_path / "c", installed="2.15.0")  # PyPI's default (CUDA) build: replaced by the pin
    assert _torch(tmp_path / "c", "https://download.pytorch.org/whl/cpu").returncode == 0
    assert (bin_ / "pip-calls").read_text().strip().endswith(f"torch=={_pin()}")


def _tree(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """path -> (mode, uid, gid, link target or '') for everything under `root`."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_gid, os.readlink(p) if p.is_symlink() else "")
    return out


def test_cache_archive_round_trip_keeps_owners_modes_and_links(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "cache", src / ".ci" / "cache")
    base = src / ".ci" / ".cache" / "configure" / "bookworm-base"
    (base / "etc").mkdir(parents=True)
    (base / "etc" / "shadow").write_text("root:*:19000::::::\n")
    (base / "etc" / "shadow").chmod(0o640)
    (base / "root").mkdir(mode=0o700)
    (base / "bin").symlink_to("usr/bin")
    if os.geteuid() == 0:
        os.chown(base / "etc" / "shadow", 0, 42)
    archive = tmp_path / "ci-cache.tar"
    packed = subprocess.run(["bash", str(src / ".ci" / "cache"), "pack", str(archive)], capture_output=True,
                            text=True, timeout=120)
    assert packed.returncode == 0, packed.stderr
    dst = tmp_path / "dst"
    (dst / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "cache", dst / ".ci" / "cache")
    unpacked = subprocess.run(["bash", str(dst / ".ci" / "cache"), "unpack", str(archive)], capture_output=True,
                              text=True, timeout=120)
    assert unpacked.returncode == 0, unpacked.stderr
    assert _tree(dst / ".ci" / ".cache") == _tree(src / ".ci" / ".cache")
    assert stat.S_IMODE((dst / ".ci/.cache/configure/bookworm-base/root").lstat().st_mode) == 0o700


def test_cache_unpack_without_an_archive_starts_empty_and_bad_usage_fails(tmp_path: Path) -> None:
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "cache", tmp_path / ".ci" / "cache")
    script = str(tmp_path / ".ci" / "cache")
    out = subprocess.run(["bash", script, "unpack", str(tmp_path / "none.tar")], capture_output=True, text=True)
    assert out.returncode == 0 and "starts empty" in out.stdout
    for argv in ([], ["pack"], ["restore", "x"]):
        assert subprocess.run(["bash", script, *argv], capture_output=True, text=True).returncode == 2, argv


@pytest.mark.parametrize("script", ["cache", "torch", "setup", "test", "run", "lint"])
def test_ci_scripts_pass_shellcheck(script: str) -> None:
    from tests.ci.test_workflows import _shellcheck

    out = subprocess.run([_shellcheck(), "--shell=bash", "--format=gcc", str(ROOT / ".ci" / script)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout
