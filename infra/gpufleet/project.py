"""Where the user's project is: found like the Pulumi CLI finds it, never next to the package.

gpufleet is used cloned or `pip install`ed. Either way every command and the Pulumi program
read stacks, `images/`, `playbooks/` and `policies/` from the *project*: the nearest
`Pulumi.yaml` upwards from the current directory, or `--project DIR` / `GPUFLEET_PROJECT`.
Run state (journal, lock, bundles, runner artifacts) lives under `.gpufleet/<stack>/` and
reports under `reports/<stack>/` of that project (both gitignored).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpufleet.errors import ConfigError

PROJECT_FILE = "Pulumi.yaml"
PROJECT_FILES = (PROJECT_FILE, "Pulumi.yml")  # the Pulumi CLI accepts either extension
PROJECT_ENV = "GPUFLEET_PROJECT"
STATE_DIR_NAME = ".gpufleet"
REPORTS_DIR_NAME = "reports"


@dataclass(frozen=True)
class Project:
    """A gpufleet project on disk. All paths are absolute."""

    root: Path
    name: str
    stacks_dir: Path

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def playbooks_dir(self) -> Path:
        return self.root / "playbooks"

    @property
    def policies_dir(self) -> Path:
        return self.root / "policies"

    @property
    def default_bom(self) -> Path:
        return self.images_dir / "bom.yaml"

    @property
    def default_compat(self) -> Path:
        return self.images_dir / "compat.yaml"

    def stack_file(self, stack: str) -> Path:
        return self.stacks_dir / f"Pulumi.{stack}.yaml"

    def path(self, relative: str | os.PathLike[str]) -> Path:
        """A path named in a stack file (e.g. `image.bom`), relative to the project root."""
        p = Path(relative)
        return p if p.is_absolute() else self.root / p

    def state_dir(self, stack: str) -> Path:
        return self.root / STATE_DIR_NAME / stack

    def reports_dir(self, stack: str) -> Path:
        return self.root / REPORTS_DIR_NAME / stack


def project_file(folder: Path) -> Path | None:
    """The folder's Pulumi.yaml (or Pulumi.yml), if it has one."""
    return next((folder / name for name in PROJECT_FILES if (folder / name).is_file()), None)


def load_project(root: Path) -> Project:
    """Read `Pulumi.yaml` in `root` (name, stackConfigDir)."""
    root = root.resolve()
    path = project_file(root) or root / PROJECT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no Pulumi.yaml here", path=str(path),
                          expected="a gpufleet project folder (create one with `gpufleet init DIR`)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(path)) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", path=str(path)) from None
    if not isinstance(doc, dict):
        raise ConfigError("not a Pulumi project file", path=str(path),
                          expected="a mapping with at least `name:` and `runtime:`")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("the project has no name", path=str(path), field="name", expected="a non-empty string")
    stack_dir = doc.get("stackConfigDir", ".")
    if not isinstance(stack_dir, str):
        raise ConfigError("must be a folder name", path=str(path), field="stackConfigDir",
                          expected="a path relative to the project, e.g. stacks")
    return Project(root=root, name=name, stacks_dir=(root / stack_dir).resolve())


def find_project(override: str | os.PathLike[str] | None = None, start: Path | None = None) -> Project:
    """`override` (from --project), else $GPUFLEET_PROJECT, else the nearest Pulumi.yaml upwards."""
    chosen = override if override is not None else os.environ.get(PROJECT_ENV) or None
    if chosen is not None:
        root = Path(chosen).expanduser()
        if not root.is_dir():
            source = "--project" if override is not None else PROJECT_ENV
            raise ConfigError("not a folder", path=str(root), field=source,
                              expected="the folder that holds the project's Pulumi.yaml")
        return load_project(root)
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if project_file(folder) is not None:
            return load_project(folder)
    raise ConfigError(f"no Pulumi.yaml in {here} or any folder above it", field="--project",
                      expected=f"run inside a gpufleet project, pass --project DIR or set {PROJECT_ENV} "
                               "(`gpufleet init DIR` creates a project)")


def current_project() -> Project:
    """The project for the running `gpufleet` command: its root group's `--project`, else discovery.

    Commands live in many modules; asking click's current context keeps them from threading the
    option through every signature. Outside a command (the Pulumi program, library use) it is
    `program_project()`: the engine's project when Pulumi runs the program, else discovery.
    """
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return program_project()
    return find_project(ctx.find_root().params.get("project"))


def program_project() -> Project:
    """The Pulumi program's project: the engine's root directory (where `pulumi` found Pulumi.yaml).

    Pulumi runs the program with the working directory at `main:` (the repository's `infra/`)
    and may be started with any $GPUFLEET_PROJECT: the engine's answer wins. Under mocks (offline
    preview, tests) and in library use there is no engine: then the same discovery as the CLI
    ($GPUFLEET_PROJECT, else the nearest Pulumi.yaml upwards) decides.
    """
    import pulumi

    root = pulumi.get_root_directory()  # the SDK's placeholder outside an engine is not a folder
    if root and project_file(Path(root)) is not None:
        return load_project(Path(root))
    return find_project()
