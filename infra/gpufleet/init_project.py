"""`gpufleet init DIR`: a new project for users who install gpufleet rather than clone it.

Like `pulumi new`, it writes a folder that the Pulumi CLI and every gpufleet command treat as a
project: Pulumi.yaml, one stack file, `images/` (the BOM, its compatibility rules, the Packer
template), `playbooks/`, a policy-pack folder and a `.gitignore`.

The playbooks, images and example stacks are the package's own copy of this repository's
files (package data under `infra/gpufleet/_template/`, symlinks into the repository, so they cannot
drift). The program and the policy pack are not copied: two one-line shims run the installed
package's (`gpufleet.program.cluster.run_program` and `gpufleet.policies.pack.run_pack`), so
upgrading gpufleet upgrades them. Pulumi's python runtime runs `__main__.py` in the project root when
Pulumi.yaml names no `main:`, with the interpreter of the `virtualenv` option (the one gpufleet
was installed in, when `init` runs from a virtualenv) or else `python3` on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import click
import yaml

from gpufleet.errors import ConfigError
from gpufleet.project import PROJECT_FILE, STATE_DIR_NAME, REPORTS_DIR_NAME

TEMPLATE_FOLDERS = ("images", "playbooks", "stacks")
DEFAULT_STACK = "dev"
STACK_CONFIG_DIR = "stacks"

PROGRAM_SHIM = '''"""This project's Pulumi program: the one installed with gpufleet (`gpufleet.program.cluster`).

`pulumi up` runs this file from the project root; the program finds the project by its
Pulumi.yaml and reads the stack's config, images/bom.yaml and the rest from here.
"""

from gpufleet.program.cluster import run_program

run_program(mocked=False)
'''

POLICY_SHIM = '''"""gpufleet's CrossGuard policy pack as installed with gpufleet: `pulumi preview --policy-pack policies`."""

from gpufleet.policies.pack import run_pack

run_pack()
'''

GITIGNORE = f"""# gpufleet run state and reports (journal, locks, bundles, runner artifacts)
/{STATE_DIR_NAME}/
/{REPORTS_DIR_NAME}/
__pycache__/
*.pyc
"""


def template_root() -> Traversable:
    """The package data `gpufleet init` copies from (also what a test compares with the repository)."""
    return resources.files("gpufleet") / "_template"


def template_member(name: str) -> bool:
    """Hidden names (tool caches and settings) and bytecode are not part of a project; the
    wheel's package-data globs skip hidden names too, so the wheel and a checkout agree."""
    return not name.startswith(".") and name != "__pycache__"


def read_template(root: Traversable | None = None) -> dict[str, bytes]:
    """Every file under the template's folders, by relative POSIX path."""
    root = root or template_root()
    files: dict[str, bytes] = {}

    def walk(node: Traversable, rel: str) -> None:
        if node.is_dir():
            for child in sorted(node.iterdir(), key=lambda c: c.name):
                if template_member(child.name):
                    walk(child, f"{rel}/{child.name}")
        else:
            files[rel] = node.read_bytes()

    for folder in TEMPLATE_FOLDERS:
        walk(root / folder, folder)
    return files


def project_name(folder: Path) -> str:
    """A Pulumi project name from the folder name (letters, digits, `-`, `_`, `.`)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.resolve().name).strip("-.")
    return name or "gpufleet"


def python_env() -> Path | None:
    """The virtualenv gpufleet runs from, if any: Pulumi must use the interpreter that has it."""
    return Path(sys.prefix) if sys.prefix != sys.base_prefix else None


def _runtime(venv: Path | None, **options: str) -> object:
    if venv is None:
        return "python"
    return {"name": "python", "options": {**options, "virtualenv": str(venv)}}


def project_files(name: str, stack: str, template: dict[str, bytes], venv: Path | None) -> dict[str, bytes]:
    """The new project, file by file. Pure: the caller reads the template and writes the result."""
    stack_file = f"{STACK_CONFIG_DIR}/Pulumi.{stack}.yaml"
    if stack_file not in template:
        shipped = sorted(p.removeprefix(f"{STACK_CONFIG_DIR}/Pulumi.").removesuffix(".yaml")
                         for p in template if p.startswith(f"{STACK_CONFIG_DIR}/"))
        raise ConfigError(f"no example stack {stack!r}", field="--stack", expected="one of " + ", ".join(shipped))
    files = {rel: data for rel, data in template.items() if not rel.startswith(f"{STACK_CONFIG_DIR}/")}
    files[stack_file] = template[stack_file]
    pulumi_yaml = {"name": name, "description": "A GPU cluster managed with gpufleet",
                   "runtime": _runtime(venv, toolchain="pip"), "stackConfigDir": STACK_CONFIG_DIR}
    files[PROJECT_FILE] = yaml.safe_dump(pulumi_yaml, sort_keys=False).encode()
    files["__main__.py"] = PROGRAM_SHIM.encode()
    policy_pack = {"description": "gpufleet guardrails for GPU clusters (the pack installed with gpufleet)",
                   "runtime": _runtime(venv)}
    files["policies/PulumiPolicy.yaml"] = yaml.safe_dump(policy_pack, sort_keys=False).encode()
    files["policies/__main__.py"] = POLICY_SHIM.encode()
    files[".gitignore"] = GITIGNORE.encode()
    return dict(sorted(files.items()))


def write_project(target: Path, files: dict[str, bytes], *, force: bool = False) -> list[str]:
    """Write `files` under `target`; return the existing files that were replaced (only with `force`).

    Everything is written into a temporary sibling first. A new folder is that sibling renamed
    into place, so an interrupted init leaves no half-made project. An existing empty folder
    (often the shell's working directory: `gpufleet init .`) is kept and the entries are moved
    into it. A non-empty folder is refused unless `force`.
    """
    target = target.resolve()
    if target.exists() and not target.is_dir():
        raise ConfigError("exists and is not a folder", path=str(target), expected="a new or empty folder")
    existing = target.is_dir() and any(target.iterdir())
    if existing and not force:
        raise ConfigError("the folder is not empty", path=str(target),
                          expected="a new or empty folder, or --force to write into it "
                                   "(files with the same names are replaced, and listed)")
    if existing:
        replaced = [rel for rel in files if (target / rel).exists()]
        _write_all(target, files)
        return replaced
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.init-", dir=target.parent))
    try:
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the project is an ordinary folder
        _write_all(staging, files)
        if target.is_dir():
            for entry in sorted(staging.iterdir()):
                entry.rename(target / entry.name)
        else:
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_all(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("-s", "--stack", default=DEFAULT_STACK, show_default=True,
              help="The example stack to start from (stacks shipped with gpufleet: dev, prod, ...).")
@click.option("--name", default=None, help="The Pulumi project name (default: the folder's name).")
@click.option("--force", is_flag=True, help="Write into a non-empty folder, replacing files with the same names.")
def init(directory: Path, stack: str, name: str | None, force: bool) -> None:
    """Create a new gpufleet project in DIRECTORY (like `pulumi new`)."""
    name = name or project_name(directory)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"{name!r} is not a Pulumi project name", field="--name",
                          expected="letters, digits, '-', '_' and '.'")
    files = project_files(name, stack, read_template(), python_env())
    replaced = write_project(directory, files, force=force)
    for rel in replaced:
        click.echo(f"replaced {directory / rel}", err=True)
    click.echo(f"created gpufleet project {name!r} in {directory} ({len(files)} files, stack {stack})")
    click.echo(f"next: cd {directory} && gpufleet validate -s {stack} && pulumi stack init {stack}")
