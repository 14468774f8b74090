"""Every command works on the user's project, found like the Pulumi CLI finds it.

The project here is a copy of this repository's project files in a temporary folder, mutated
so that reading the repository's own files instead would give a different answer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.errors import ConfigError
from gpufleet.init_project import project_files, project_venv, read_template, template_member, write_project
from gpufleet.project import PROJECT_ENV, current_project, find_project, program_project

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_project_from_the_environment(monkeypatch):
    monkeypatch.delenv(PROJECT_ENV, raising=False)


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def copy_project(dest: Path) -> Path:
    """The repository's project files (not its code) in `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "Pulumi.yaml", dest / "Pulumi.yaml")
    for folder in ("stacks", "images", "playbooks"):
        shutil.copytree(REPO_ROOT / folder, dest / folder)
    return dest


def edit_yaml(path: Path, change) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy whose dev stack asks for 32 GPUs (the repository's asks for 16)."""
    root = copy_project(tmp_path / "proj")
    edit_yaml(root / "stacks" / "Pulumi.dev.yaml", lambda d: d["config"]["gpufleet:cluster"].update(targetGpus=32))
    return root


def plan_nodes(result) -> int:
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["topology"]["nodes"]


# --- discovery -----------------------------------------------------------------------------

def test_the_nearest_pulumi_yaml_upwards_is_the_project_and_its_stack_config_dir_holds_stacks(tmp_path):
    root = tmp_path / "p"
    (root / "config" / "deep" / "er").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text("name: p\nruntime: python\nstackConfigDir: config\n")
    found = find_project(start=root / "config" / "deep" / "er")
    assert (found.root, found.name, found.stacks_dir) == (root.resolve(), "p", (root / "config").resolve())
    assert found.stack_file("x") == (root / "config" / "Pulumi.x.yaml").resolve()


def test_without_stack_config_dir_stacks_live_beside_pulumi_yaml(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text("name: p\nruntime: python\n")
    assert find_project(start=tmp_path).stacks_dir == tmp_path.resolve()


def test_a_pulumi_yml_is_a_project_file_too(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "Pulumi.yml").write_text("name: short\nruntime: python\n")
    assert find_project(start=tmp_path / "sub").name == "short"


def test_override_beats_the_environment_which_beats_discovery(tmp_path, monkeypatch):
    a, b, here = copy_project(tmp_path / "a"), copy_project(tmp_path / "b"), copy_project(tmp_path / "here")
    monkeypatch.chdir(here)
    assert find_project().root == here.resolve()
    monkeypatch.setenv(PROJECT_ENV, str(b))
    assert find_project().root == b.resolve()
    assert find_project(a).root == a.resolve()


def test_no_project_exits_2_and_says_where_it_looked(tmp_path, monkeypatch):
    lonely = tmp_path / "no" / "project"
    lonely.mkdir(parents=True)
    monkeypatch.chdir(lonely)
    monkeypatch.delenv(PROJECT_ENV, raising=False)
    result = run("plan", "-s", "dev")
    assert result.exit_code == 2
    assert f"no Pulumi.yaml in {lonely.resolve()} or any folder above it" in result.output
    assert "--project" in result.output and "gpufleet init" in result.output


def test_a_project_option_that_is_not_a_folder_exits_2(tmp_path):
    result = run("--project", str(tmp_path / "missing"), "plan", "-s", "dev")
    assert result.exit_code == 2 and "missing" in result.output and "not a folder" in result.output


def test_a_broken_pulumi_yaml_exits_2_naming_it(tmp_path):
    (tmp_path / "Pulumi.yaml").write_bytes(b"name: [unclosed\n")
    result = run("--project", str(tmp_path), "plan", "-s", "dev")
    assert result.exit_code == 2 and "Pulumi.yaml" in result.output and "not valid YAML" in result.output


# --- every command reads the project's files -------------------------------------------------

def test_plan_reads_the_project_it_runs_in_and_from_its_subfolders(project, monkeypatch):
    monkeypatch.chdir(project)
    assert plan_nodes(run("plan", "-s", "dev", "--json")) == 4
    monkeypatch.chdir(project / "playbooks" / "roles")
    assert plan_nodes(run("plan", "-s", "dev", "--json")) == 4


def test_project_option_and_environment_name_the_project_from_elsewhere(project, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # another project: its dev stack has 2 nodes
    assert plan_nodes(run("plan", "-s", "dev", "--json")) == 2
    assert plan_nodes(run("--project", str(project), "plan", "-s", "dev", "--json")) == 4
    assert plan_nodes(run("plan", "-s", "dev", "--json", env={PROJECT_ENV: str(project)})) == 4


def test_the_bom_is_the_projects_and_image_bom_is_relative_to_its_root(project, monkeypatch):
    bom = project / "images" / "bom.yaml"
    edit_yaml(bom, lambda d: d["components"]["fabric_manager"].update(version="570.1.1"))
    monkeypatch.chdir(project / "stacks")
    result = run("validate", "-s", "dev")
    assert result.exit_code == 2 and "BOM_FABRIC_MANAGER_MISMATCH" in result.output
    monkeypatch.chdir(REPO_ROOT)
    assert run("validate", "-s", "dev").exit_code == 0  # the repository's own BOM is untouched


def test_the_compatibility_rules_are_the_projects(project, monkeypatch):
    edit_yaml(project / "images" / "compat.yaml", lambda d: d["cuda_minimum_driver"]["table"].clear())
    monkeypatch.chdir(project)
    result = run("validate", "-s", "dev", "--json")
    assert result.exit_code == 2
    assert "BOM_CUDA_UNKNOWN" in {f["code"] for f in json.loads(result.output)["findings"]}


def test_image_uses_the_projects_template_bom_and_state_folder(project, monkeypatch):
    edit_yaml(project / "images" / "bom.yaml", lambda d: d.update(name="mutated-bom"))
    monkeypatch.chdir(project / "stacks")
    result = run("image", "-s", "dev", "--json")
    assert result.exit_code == 0, result.output
    argv = json.loads(result.output)["argv"]
    assert argv[-1] == str(project.resolve() / "images" / "gpufleet.pkr.hcl")
    assert "bom_name=mutated-bom" in argv
    extravars = Path(next(a.split("=", 1)[1] for a in argv if a.startswith("extravars_file=")))
    assert extravars == project.resolve() / ".gpufleet" / "dev" / "image" / "ubuntu-22.04-extravars.json"
    assert extravars.is_file()


def test_a_stack_file_that_is_not_utf8_exits_2_naming_the_file(project, monkeypatch):
    path = project / "stacks" / "Pulumi.latin1.yaml"
    path.write_bytes((REPO_ROOT / "stacks" / "Pulumi.dev.yaml").read_bytes() + "# café\n".encode("latin-1"))
    monkeypatch.chdir(project)
    result = run("validate", "-s", "latin1")
    assert result.exit_code == 2, result.output
    assert "Pulumi.latin1.yaml" in result.output and "not UTF-8" in result.output
    assert "Traceback" not in result.output


def test_the_configurator_runs_the_projects_playbooks(project, monkeypatch):
    from gpufleet.configure.runner import AnsibleConfigurator

    monkeypatch.chdir(project / "images")
    conf = AnsibleConfigurator(project / ".gpufleet" / "dev", collections=project)
    assert conf.playbook_dir == (project / "playbooks").resolve()


def test_the_collections_cache_is_per_user_and_can_be_moved(tmp_path, monkeypatch):
    from gpufleet.configure.collections import collections_path

    monkeypatch.delenv("GPUFLEET_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert collections_path().parent == tmp_path / "xdg" / "gpufleet" / "collections"
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "ci-cache"))
    assert collections_path().parent == tmp_path / "ci-cache" / "collections"


def test_collections_are_extracted_into_the_shared_cache_once(tmp_path):
    import zipfile

    from gpufleet.configure.collections import ensure_collections

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "ansible-9.9.9-py3-none-any.whl", "w") as zf:  # no download: it is cached
        for name in ("community/general", "amazon/aws", "other/thing"):
            zf.writestr(f"ansible_collections/{name}/MANIFEST.json", "{}")
    dest = ensure_collections(tmp_path, version="9.9.9")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("MANIFEST.json")) == [
        "ansible_collections/amazon/aws/MANIFEST.json", "ansible_collections/community/general/MANIFEST.json"]
    assert ensure_collections(tmp_path, version="9.9.9") == dest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ansible-9.9.9", "wheels"]  # no staging left


# --- the Pulumi program ------------------------------------------------------------------------

def test_the_program_takes_the_engines_root_directory_over_the_working_directory(project, monkeypatch):
    import pulumi

    monkeypatch.chdir(REPO_ROOT / "infra")  # Pulumi runs the repository's program from `main: infra/`
    monkeypatch.setattr(pulumi, "get_root_directory", lambda: str(project))
    assert program_project().root == project.resolve()
    assert current_project().root == project.resolve()  # what plan_stack(spec) in the program asks
    monkeypatch.setattr(pulumi, "get_root_directory", lambda: "root_directory")  # the SDK's placeholder
    assert program_project().root == REPO_ROOT


def test_the_program_checks_the_bom_of_the_project_pulumi_runs_it_for(project, monkeypatch):
    """`pulumi up` in `project` (cwd at `main:`, here another checkout's infra/): its BOM decides."""
    import pulumi

    from gpufleet.program.capture import capture_program
    from gpufleet.spec import load_stack_path

    edit_yaml(project / "images" / "bom.yaml", lambda d: d["components"]["fabric_manager"].update(version="570.1.1"))
    spec = load_stack_path(project / "stacks" / "Pulumi.dev.yaml")
    monkeypatch.chdir(REPO_ROOT / "infra")
    monkeypatch.setattr(pulumi, "get_root_directory", lambda: str(project))
    with pytest.raises(ConfigError, match="BOM_FABRIC_MANAGER_MISMATCH"):
        capture_program(spec, stack="dev")
    monkeypatch.setattr(pulumi, "get_root_directory", lambda: str(REPO_ROOT))  # the repository's BOM is sound
    assert capture_program(spec, stack="dev").registrations


# --- gpufleet init ---------------------------------------------------------------------------

def test_the_template_is_the_repositorys_own_files():
    template = read_template()
    on_disk = {p.relative_to(REPO_ROOT).as_posix(): p.read_bytes()
               for folder in ("images", "playbooks", "stacks") for p in sorted((REPO_ROOT / folder).rglob("*"))
               if p.is_file() and all(map(template_member, p.relative_to(REPO_ROOT).parts))}
    assert template == on_disk


def test_init_writes_a_project_that_validates_from_inside(tmp_path, monkeypatch):
    target = tmp_path / "My Cluster!"
    result = run("init", str(target))
    assert result.exit_code == 0, result.output
    pulumi_yaml = yaml.safe_load((target / "Pulumi.yaml").read_text())
    assert pulumi_yaml["name"] == "My-Cluster" and pulumi_yaml["stackConfigDir"] == "stacks"
    assert "main" not in pulumi_yaml  # Pulumi runs ./__main__.py, the shim of the installed program
    assert "from gpufleet.program.cluster import run_program\n\nrun_program(mocked=False)" in (
        target / "__main__.py").read_text()
    assert "from gpufleet.policies.pack import run_pack\n\nrun_pack()" in (target / "policies" / "__main__.py").read_text()
    assert yaml.safe_load((target / "policies" / "PulumiPolicy.yaml").read_text())["runtime"]
    assert "/.gpufleet/" in (target / ".gitignore").read_text()
    assert sorted(p.name for p in (target / "stacks").iterdir()) == ["Pulumi.dev.yaml"]
    for rel in ("images/bom.yaml", "images/compat.yaml", "images/gpufleet.pkr.hcl", "playbooks/site.yml",
                "playbooks/preflight.yml", "stacks/Pulumi.dev.yaml"):
        assert (target / rel).read_bytes() == (REPO_ROOT / rel).read_bytes(), rel
    monkeypatch.chdir(target / "playbooks")
    monkeypatch.delenv(PROJECT_ENV, raising=False)
    result = run("validate", "-s", "dev")
    assert result.exit_code == 0, result.output
    assert find_project().root == target.resolve()


def test_an_init_project_runs_the_packages_program_the_way_pulumi_starts_it(tmp_path, monkeypatch):
    """pulumi-language-python-exec: chdir to the project, then runpy.run_path(".", run_name="__main__")."""
    import runpy

    from gpufleet.program import capture, cluster as program
    from gpufleet.spec import load_stack_path

    target = tmp_path / "fresh"
    assert run("init", str(target)).exit_code == 0
    ran: list = []
    real = program.run_program

    def recorded(*, mocked: bool = False):
        ran.append(real(mocked=mocked))
        return ran[-1]

    def as_pulumi_starts_it(*, mocked: bool):
        runpy.run_path(".", run_name="__main__")  # ./__main__.py -> gpufleet.program.cluster.run_program
        return ran[-1]

    monkeypatch.setattr(program, "run_program", recorded)
    monkeypatch.setattr(capture, "run_program", as_pulumi_starts_it)
    monkeypatch.chdir(target)
    result = capture.capture_program(load_stack_path(target / "stacks" / "Pulumi.dev.yaml"), stack="dev")
    assert len(ran) == 1 and result.registrations and "deployedSlots" in result.outputs


def test_init_runtime_names_no_absolute_virtualenv(tmp_path):
    # issue 23 item 4: an absolute virtualenv path tied the project (and its CI) to one machine
    template = {"stacks/Pulumi.dev.yaml": b"config: {}\n"}
    own = project_venv(tmp_path, tmp_path / ".venv")
    with_venv = yaml.safe_load(project_files("p", "dev", template, own)["Pulumi.yaml"])
    assert with_venv["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert project_venv(tmp_path, Path("/opt/venv")) is None  # elsewhere: the python3 on PATH
    assert yaml.safe_load(project_files("p", "dev", template, None)["Pulumi.yaml"])["runtime"] == "python"


def test_init_into_a_non_empty_folder_adds_the_project_and_keeps_the_users_files(tmp_path):
    # issue 23 item 6: init never clobbers (it used to refuse here, and --force replaced everything)
    (tmp_path / "notes.txt").write_text("mine")
    result = run("init", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "Pulumi.yaml").is_file()


def test_init_force_names_the_file_it_replaces(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "Pulumi.yaml").write_text("name: old\nruntime: python\n")
    result = run("init", str(tmp_path), "--name", tmp_path.name, "--force", "Pulumi.yaml")
    assert result.exit_code == 0, result.output
    assert f"replaced {tmp_path / 'Pulumi.yaml'}" in result.output
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert yaml.safe_load((tmp_path / "Pulumi.yaml").read_text())["name"] == tmp_path.name


def test_init_into_an_empty_folder_leaves_no_staging_folder_behind(tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    assert write_project(target, {"a/b.txt": b"x"}).added == ("a/b.txt",)
    assert (target / "a" / "b.txt").read_bytes() == b"x"
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]


def test_init_dot_fills_the_working_directory_in_place(tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    inode = here.stat().st_ino
    monkeypatch.chdir(here)
    result = run("init", ".")
    assert result.exit_code == 0, result.output
    assert here.stat().st_ino == inode  # the shell's working directory is the project, not a deleted folder
    assert (here / "Pulumi.yaml").is_file() and yaml.safe_load((here / "Pulumi.yaml").read_text())["name"] == "here"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]
    assert run("validate", "-s", "dev").exit_code == 0


def test_init_with_an_unknown_example_stack_exits_2_listing_the_shipped_ones(tmp_path):
    result = run("init", str(tmp_path / "x"), "--stack", "nope")
    assert result.exit_code == 2 and "dev" in result.output and "prod" in result.output
    assert not (tmp_path / "x").exists()


def test_init_refuses_a_file_where_the_folder_should_be(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="not a folder"):
        write_project(tmp_path / "f", {"a": b""})
