"""`gpufleet init DIR`: a new project for users who install gpufleet rather than clone it.

Like `pulumi new`, it writes a folder that the Pulumi CLI and every gpufleet command treat as a
project: Pulumi.yaml, one stack file, `images/` (the BOM, its compatibility rules, the Packer
template), `playbooks/`, a policy-pack folder and a `.gitignore`. Run again in a project (`gpufleet
init . -s prod`), it adds only the files that are missing: the BOM and playbooks are the user's
once written, so a file that differs is kept and its diff shown, and replaced only when named
with `--force FILE`.

The playbooks, images and example stacks are the package's own copy of this repository's
files (package data under `infra/gpufleet/_template/`, symlinks into the repository, so they cannot
drift). The program and the policy pack are not copied: two one-line shims run the installed
package's (`gpufleet.program.cluster.run_program` and `gpufleet.policies.pack.run_pack`), so
upgrading gpufleet upgrades them. Pulumi's python runtime runs `__main__.py` in the project root when
Pulumi.yaml names no `main:`, with the interpreter of the `virtualenv` option (`.venv`, relative,
when gpufleet runs from the project's own `.venv`) or else `python3` on PATH: no absolute path,
so the project and its CI work on another machine.

`.github/` gets the project's own pipeline (gpufleet.init_ci): checks per stack the project has,
rollouts of its deployed stacks in resumable parts, the nightly drift check and the setup action.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import click
import yaml

from gpufleet import init_ci
from gpufleet.errors import ConfigError, UsageError
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


def project_venv(target: Path, venv: Path | None) -> str | None:
    """The `virtualenv` Pulumi.yaml names, relative to the project: `.venv` when gpufleet runs from
    the project's own `.venv` (what the CI's setup action makes), else none, and Pulumi runs the
    `python3` on PATH (an activated virtualenv's). An absolute path would tie the project, and its
    CI, to the machine that ran init."""
    if venv is None:
        return None
    try:
        return ".venv" if venv.resolve() == (target.resolve() / ".venv") else None
    except OSError:
        return None


def _runtime(venv: str | None, **options: str) -> object:
    if venv is None:
        return "python"
    return {"name": "python", "options": {**options, "virtualenv": venv}}


def project_files(name: str, stack: str, template: dict[str, bytes], venv: str | None,
                  existing_stacks: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """The new project, file by file. Pure: the caller reads the template and writes the result.
    `existing_stacks` (name -> stack file) are the project's other stacks: the CI pipeline names
    them all, and only them."""
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
    stacks = {**(existing_stacks or {}), stack: template[stack_file]}
    files.update(init_ci.workflow_files([init_ci.stack_facts(n, text) for n, text in sorted(stacks.items())]))
    return dict(sorted(files.items()))


@dataclass(frozen=True)
class InitResult:
    """What `write_project` did: files written new, replaced (named with --force), kept as they
    were (the user's, which differ from gpufleet's: `differs` holds each one's diff) and identical."""

    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    differs: dict[str, str] = field(default_factory=dict)
    unchanged: tuple[str, ...] = ()


def changes(target: Path, files: dict[str, bytes], force: frozenset[str] = frozenset()) -> InitResult:
    """Pure but for reading `target`: which files are missing, which differ and how (a unified
    diff, existing file first), which `force` may replace. Nothing the user has is overwritten
    unless its path is in `force`."""
    added, replaced, unchanged = [], [], []
    differs: dict[str, str] = {}
    for rel, data in files.items():
        path = target / rel
        if not path.exists() and not path.is_symlink():
            added.append(rel)
            continue
        have = path.read_bytes() if path.is_file() else b""
        if have == data:
            unchanged.append(rel)
        elif rel in force:
            replaced.append(rel)
        else:
            differs[rel] = _diff(rel, have, data)
    return InitResult(tuple(added), tuple(replaced), differs, tuple(unchanged))


def _diff(rel: str, have: bytes, want: bytes) -> str:
    try:
        old, new = have.decode().splitlines(keepends=True), want.decode().splitlines(keepends=True)
    except UnicodeDecodeError:
        return f"Binary files {rel} (yours) and gpufleet's {rel} differ\n"
    return "".join(difflib.unified_diff(old, new, fromfile=f"{rel} (yours)", tofile=f"{rel} (gpufleet init)"))


def write_project(target: Path, files: dict[str, bytes], *, force: frozenset[str] = frozenset()) -> InitResult:
    """Write the files `changes` finds missing (and those named in `force`) under `target`.

    A new folder is written into a temporary sibling first and renamed into place, so an
    interrupted init leaves no half-made project; an existing empty folder (often the shell's
    working directory: `gpufleet init .`) is kept and the entries are moved into it. In a folder
    that has files (an existing project: adding a stack), each file is written atomically and
    only where it is missing or named in `force`.
    """
    target = target.resolve()
    if target.exists() and not target.is_dir():
        raise ConfigError("exists and is not a folder", path=str(target), expected="a new or empty folder")
    unknown = sorted(force - set(files))
    if unknown:
        raise UsageError(f"--force {unknown[0]}: not a file gpufleet init writes", field="--force",
                         expected="a path relative to the project folder, one of: " + ", ".join(
                             rel for rel in files if "/" not in rel or rel.startswith(STACK_CONFIG_DIR)))
    if target.is_dir() and any(target.iterdir()):
        result = changes(target, files, force)
        _write_all(target, {rel: files[rel] for rel in (*result.added, *result.replaced)})
        return result
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
    return InitResult(added=tuple(files))


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
@click.option("--force", "force", multiple=True, metavar="FILE",
              help="Replace this existing file (relative to DIRECTORY) with gpufleet's; repeat per file. "
                   "Without it an existing file is never overwritten: init shows how it differs.")
def init(directory: Path, stack: str, name: str | None, force: tuple[str, ...]) -> None:
    """Create a new gpufleet project in DIRECTORY (like `pulumi new`), or add what an existing one
    lacks (a stack: `gpufleet init . -s prod`); files you have are kept, and their differences shown."""
    name = name or _existing_name(directory) or project_name(directory)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"{name!r} is not a Pulumi project name", field="--name",
                          expected="letters, digits, '-', '_' and '.'")
    files = project_files(name, stack, read_template(), project_venv(directory, python_env()),
                          _existing_stacks(directory))
    result = write_project(directory, files, force=frozenset(Path(f).as_posix() for f in force))
    for rel in result.replaced:
        click.echo(f"replaced {directory / rel} (--force)", err=True)
    for rel, diff in result.differs.items():
        click.echo(f"kept {directory / rel}: yours differs from gpufleet's (--force {rel} replaces it)", err=True)
        click.echo(diff, err=True, nl=False)
    if len(result.added) == len(files):
        click.echo(f"created gpufleet project {name!r} in {directory} ({len(files)} files, stack {stack})")
    else:
        click.echo(f"added {len(result.added)} missing file(s) to {directory}, replaced {len(result.replaced)}, "
                   f"kept {len(result.differs)} that differ, {len(result.unchanged)} already the same")
        for rel in result.added:
            click.echo(f"  added {rel}")
    click.echo(f"next: cd {directory} && gpufleet validate -s {stack} && pulumi stack init {stack}")


def _existing_stacks(directory: Path) -> dict[str, bytes]:
    """The stack files a project already has (adding a stack keeps them in its CI pipeline)."""
    found: dict[str, bytes] = {}
    for path in sorted((directory / STACK_CONFIG_DIR).glob("Pulumi.*.yaml")):
        try:
            found[path.name.removeprefix("Pulumi.").removesuffix(".yaml")] = path.read_bytes()
        except OSError:
            continue
    return found


def _existing_name(directory: Path) -> str | None:
    """An existing project's own name: adding a stack must not make its Pulumi.yaml differ by name."""
    try:
        doc = yaml.safe_load((directory / PROJECT_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    value = doc.get("name") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None
