"""`gpufleet init` never clobbers (issue 23 item 6): in an existing project it adds only what is
missing (a second stack), shows a diff for each file of the user's that differs from gpufleet's
and keeps it, and replaces a file only when `--force FILE` names it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gpufleet.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _project(tmp_path: Path) -> Path:
    target = tmp_path / "p"
    assert run("init", str(target)).exit_code == 0
    return target


def test_adding_a_stack_to_a_project_adds_only_that_stack(tmp_path):
    target = _project(tmp_path)
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    result = run("init", str(target), "-s", "prod")
    assert result.exit_code == 0, result.output
    after = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    assert set(after) - set(before) == {target / "stacks" / "Pulumi.prod.yaml"}
    assert all(after[p] == data for p, data in before.items())
    assert "added 1 missing file(s)" in result.output and "added stacks/Pulumi.prod.yaml" in result.output


def test_a_file_the_user_changed_is_kept_and_its_difference_shown(tmp_path):
    target = _project(tmp_path)
    bom = target / "images" / "bom.yaml"
    mine = bom.read_text().replace("\n", "\n# my pin note\n", 1)
    bom.write_text(mine)
    playbook = target / "playbooks" / "site.yml"
    playbook.unlink()
    result = run("init", str(target), "-s", "prod")
    assert result.exit_code == 0, result.output
    assert bom.read_text() == mine
    assert f"kept {target / 'images/bom.yaml'}" in result.output and "--force images/bom.yaml" in result.output
    assert "--- images/bom.yaml (yours)" in result.output and "-# my pin note" in result.output
    assert playbook.is_file()  # a missing file of the project comes back


def test_force_replaces_only_the_file_it_names(tmp_path):
    target = _project(tmp_path)
    bom, compat = target / "images" / "bom.yaml", target / "images" / "compat.yaml"
    bom.write_text(bom.read_text() + "# mine\n")
    compat.write_text(compat.read_text() + "# mine too\n")
    result = run("init", str(target), "--force", "images/bom.yaml")
    assert result.exit_code == 0, result.output
    assert not bom.read_text().endswith("# mine\n")
    assert compat.read_text().endswith("# mine too\n")


def test_force_of_a_file_init_does_not_write_is_a_usage_error(tmp_path):
    target = _project(tmp_path)
    result = run("init", str(target), "--force", "images/nope.yaml")
    assert result.exit_code == 2 and "--force images/nope.yaml" in result.output


def test_a_second_init_keeps_the_projects_own_name(tmp_path):
    target = _project(tmp_path)
    (target / "Pulumi.yaml").write_text((target / "Pulumi.yaml").read_text().replace("name: p\n", "name: mine\n", 1))
    result = run("init", str(target), "-s", "prod")
    assert result.exit_code == 0, result.output
    assert "Pulumi.yaml" not in result.output.replace("Pulumi.prod.yaml", "")
