"""gpufleet installed from its wheel, not from this checkout, reads the user's project.

This is how the package-relative paths broke: an editable install hides them, because the
package folder and the project are the same checkout. So: build the wheel, install it into a
fresh virtualenv (no pip, no network: the test environment's site-packages supply the
dependencies through PYTHONPATH, where no `.pth` of the editable install is read), copy the
project files elsewhere, mutate them there, and run the installed `gpufleet` from there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from gpufleet.init_project import template_member

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "README.md", "infra", "policies", "playbooks", "images", "stacks")
TEMPLATE_FOLDERS = ("images", "playbooks", "stacks")

pytestmark = pytest.mark.slow  # about 15 s: a wheel build, a virtualenv, a dozen CLI runs


class Installed:
    """The wheel installed into a fresh virtualenv; `run` runs its `gpufleet`."""

    def __init__(self, venv: Path) -> None:
        self.venv = venv
        self.python = venv / "bin" / "python"
        paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        self.env = {k: v for k, v in os.environ.items() if k not in ("GPUFLEET_PROJECT", "PYTHONPATH")}
        self.env["PYTHONPATH"] = os.pathsep.join(paths)

    @property
    def site_packages(self) -> Path:
        out = self.py("import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=self.venv)
        return Path(out.strip())

    def run(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / "gpufleet"), *args], cwd=cwd, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=120)

    def py(self, code: str, cwd: Path) -> str:
        proc = subprocess.run([str(self.python), "-c", code], cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in BUILD_INPUTS:  # a clean copy: an in-tree build/ could carry files deleted since
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(work / "dist"), str(src)], check=True, timeout=300)
    [wheel] = (work / "dist").glob("gpufleet-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    return Installed(venv)


@pytest.fixture
def project(tmp_path) -> Path:
    """The repository's project files, copied; dev asks for 32 GPUs and names another BOM."""
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(REPO_ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    for folder in ("stacks", "images", "playbooks"):
        shutil.copytree(REPO_ROOT / folder, root / folder)
    _edit(root / "stacks" / "Pulumi.dev.yaml", lambda d: d["config"]["gpufleet:cluster"].update(targetGpus=32))
    _edit(root / "images" / "bom.yaml", lambda d: d.update(name="mutated-bom"))
    return root


def _edit(path: Path, change) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _nodes(proc: subprocess.CompletedProcess) -> int:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["topology"]["nodes"]


def test_the_installed_package_is_the_wheel_not_this_checkout(installed):
    origin = installed.py("import gpufleet; print(gpufleet.__file__)", cwd=installed.venv)  # `-c` puts the cwd first
    assert Path(origin.strip()).is_relative_to(installed.site_packages)


def test_the_wheel_installs_one_top_level_import_package_gpufleet(installed):
    """A generic name (`infra`, `policies`) in site-packages collides with any other project's."""
    site = installed.site_packages
    [dist_info] = site.glob("gpufleet-*.dist-info")
    assert (dist_info / "top_level.txt").read_text().split() == ["gpufleet"]
    tops = {p.name for p in site.iterdir() if not p.name.endswith(".dist-info") and p.name != "__pycache__"}
    assert tops == {"gpufleet"}, tops
    for generic in ("infra", "policies"):
        proc = subprocess.run([str(installed.python), "-c", f"import {generic}"], cwd=installed.venv,
                              env=installed.env, capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, (generic, proc.stderr)


def test_a_user_project_with_its_own_infra_folder_works(installed, project):
    """The collision this name fixes: a project folder named infra/ (a package even) shadowed ours."""
    (project / "infra").mkdir()
    (project / "infra" / "__init__.py").write_text("raise ImportError('the user project infra package')\n")
    (project / "policies").mkdir()
    (project / "policies" / "__init__.py").write_text("raise ImportError('the user project policies package')\n")
    assert _nodes(installed.run("plan", "-s", "dev", "--json", cwd=project)) == 4
    # Pulumi runs a project's __main__.py with the project root first on sys.path: imports still find ours
    assert installed.py("import gpufleet.cli, gpufleet.program.cluster, gpufleet.policies.rules; print('ok')",
                        cwd=project).strip() == "ok"
    version = installed.run("--version", cwd=project)
    assert version.returncode == 0 and "0.1.0" in version.stdout, version.stderr


def test_the_wheels_project_template_is_the_repositorys_files(installed):
    template = installed.site_packages / "gpufleet" / "_template"

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and all(map(template_member, p.relative_to(root).parts))}

    for folder in TEMPLATE_FOLDERS:
        assert not (template / folder).is_symlink()  # real files in the wheel, not links back here
        assert files(template / folder) == files(REPO_ROOT / folder), folder


def test_commands_read_the_mutated_project_wherever_they_run_from(installed, project, tmp_path):
    assert _nodes(installed.run("plan", "-s", "dev", "--json", cwd=project)) == 4
    assert _nodes(installed.run("plan", "-s", "dev", "--json", cwd=project / "playbooks" / "roles")) == 4
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _nodes(installed.run("--project", str(project), "plan", "-s", "dev", "--json", cwd=elsewhere)) == 4
    assert _nodes(installed.run("plan", "-s", "dev", "--json", cwd=elsewhere,
                                env={"GPUFLEET_PROJECT": str(project)})) == 4
    image = installed.run("image", "-s", "dev", "--json", cwd=project / "stacks")
    assert image.returncode == 0, image.stderr
    argv = json.loads(image.stdout)["argv"]
    assert "bom_name=mutated-bom" in argv and argv[-1] == str(project.resolve() / "images" / "gpufleet.pkr.hcl")


def test_without_a_project_every_command_exits_2_saying_where_it_looked(installed, tmp_path):
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    proc = installed.run("validate", "-s", "dev", cwd=lonely)
    assert proc.returncode == 2 and f"no Pulumi.yaml in {lonely.resolve()}" in proc.stderr


def test_a_broken_project_bom_fails_validation(installed, project):
    _edit(project / "images" / "bom.yaml", lambda d: d["components"]["fabric_manager"].update(version="570.1.1"))
    proc = installed.run("validate", "-s", "dev", "--json", cwd=project)
    assert proc.returncode == 2
    assert "BOM_FABRIC_MANAGER_MISMATCH" in {f["code"] for f in json.loads(proc.stdout)["findings"]}


def test_init_makes_a_project_that_validates_and_runs_the_installed_program(installed, tmp_path):
    target = tmp_path / "newcluster"
    made = installed.run("init", str(target), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    # no absolute virtualenv (issue 23 item 4): outside the project's own .venv, Pulumi runs the python3
    # on PATH, the activated virtualenv's (as the CI's setup action puts .venv/bin on PATH)
    assert yaml.safe_load((target / "Pulumi.yaml").read_text())["runtime"] == "python"
    assert yaml.safe_load((target / "policies" / "PulumiPolicy.yaml").read_text())["runtime"] == "python"
    proc = installed.run("validate", "-s", "dev", cwd=target / "stacks")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # What Pulumi's python runtime runs: ./__main__.py with the project on sys.path[0] (the program),
    # policies/__main__.py with policies/ first (the pack). Both shims must reach the installed modules,
    # never the project's own `policies/` folder.
    find = ("import importlib.util, sys; sys.path[:0] = sys.argv[1:]; "
            "print(importlib.util.find_spec('gpufleet.program.cluster').origin); "
            "print(importlib.util.find_spec('gpufleet.policies.pack').origin)")
    for first in ([str(target)], [str(target / "policies"), str(target)]):
        proc = subprocess.run([str(installed.python), "-c", find, *first], cwd=target, env=installed.env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        for origin in proc.stdout.split():
            assert Path(origin).is_relative_to(installed.site_packages), (first, origin)
