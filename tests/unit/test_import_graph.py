"""The package's imports form no cycle and never run from a lower layer up to a higher one.

The graph is read from the source with `ast`, not by importing: every `import` and `from ...
import` counts wherever it stands (module level, inside a function, under `if TYPE_CHECKING:`),
because an import hidden in a function or behind TYPE_CHECKING still ties the two modules
together; hiding it only moves the failure from import time to call time (or to the reader).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import gpufleet

# The layers, lowest first (README "Development notes": the reason for each). A module may import
# from its own layer or a lower one. The key is the top-level module or package under gpufleet;
# a command module (`command.py`, `*_command.py`: a click subcommand of `gpufleet`, which parses
# options and composes the layers as cli.py does) is in the cli layer, whichever package holds it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("__init__", "errors", "findings", "durable", "tagging", "masking", "strict_yaml", "envelope")),
    ("facts", ("catalog", "catalog_prices", "spec", "project", "bom", "bom_record", "policies", "aws_rules",
               "vendor_releases")),
    ("plan", ("plan", "ports")),
    ("adapters", ("gates", "configure", "cloud", "monitoring", "validate_cloud")),
    ("pool", ("pool", "program", "changeset")),
    ("rollout", ("rollout", "sim")),
    ("day two", ("reports", "daytwo", "ops", "cost", "init_project", "init_ci", "lifecycle")),
    ("cli", ("cli", "docs_gen", "changeset_command")),
)


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    path: Path
    line: int


def module_files(package_dir: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (folders without __init__.py,
    such as the project template, are data, not packages)."""
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        folders = [package_dir.joinpath(*parts[:i]) for i in range(1, len(parts))]
        if not all((folder / "__init__.py").is_file() for folder in folders):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def _deepest_module(name: str, modules: dict[str, Path]) -> str | None:
    """The module a dotted name lands in (`a.b.Thing` -> `a.b`), or None outside the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _from_base(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a `from X import ...` names, relative levels resolved."""
    if not node.level:
        return node.module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def imports_of(importer: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of another module of the package in one file, at any depth of the tree."""
    found: list[Import] = []
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [_deepest_module(alias.name, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, importer, is_package)
            # `from pkg import sub` imports the submodule; `from mod import name` the module itself
            targets = [_deepest_module(f"{base}.{alias.name}", modules) for alias in node.names]
        else:
            continue
        for target in targets:
            if target is not None and target != importer:
                found.append(Import(importer, target, path, node.lineno))
    return found


def import_graph(package_dir: Path, package: str) -> list[Import]:
    modules = module_files(package_dir, package)
    return [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def cycles(imports: list[Import]) -> list[list[str]]:
    """Each strongly connected group of modules, as one cycle through it in import order
    (Tarjan's algorithm, iterative; the cycle is the shortest path back to its first module)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.importer, set()).add(imp.imported)
        graph.setdefault(imp.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return [_cycle_through(sorted(group)[0], group, graph) for group in groups]


def _cycle_through(start: str, group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest import path from `start` back to itself inside its group (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & group):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a group but on no cycle")


def layer_of(module: str, package: str, layers=LAYERS) -> tuple[int, str]:
    """(rank, name) of the layer a module belongs to, by its top-level name under the package."""
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    if parts[-1] == "command" or parts[-1].endswith("_command"):
        key = layers[-1][1][0]
    for rank, (name, members) in enumerate(layers):
        if key in members:
            return rank, name
    raise AssertionError(f"{module}: {key!r} is in no layer of LAYERS; place it in one")


def upward_imports(imports: list[Import], package: str, layers=LAYERS) -> list[str]:
    """'file:line: a (layer) imports b (higher layer)' for each import that runs upward."""
    found: list[str] = []
    for imp in imports:
        low_rank, low_name = layer_of(imp.importer, package, layers)
        high_rank, high_name = layer_of(imp.imported, package, layers)
        line = f"{imp.path}:{imp.line}: {imp.importer} ({low_name}) imports {imp.imported} ({high_name})"
        if high_rank > low_rank and line not in found:  # `from m import a, b` is one import of m
            found.append(line)
    return found


PACKAGE_DIR = Path(gpufleet.__file__).resolve().parent


@functools.cache
def package_imports() -> tuple[Import, ...]:
    return tuple(import_graph(PACKAGE_DIR, "gpufleet"))


def test_the_package_has_no_import_cycle():
    found = cycles(list(package_imports()))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_no_module_imports_from_a_higher_layer():
    found = upward_imports(list(package_imports()), "gpufleet")
    assert not found, "imports from a lower layer up to a higher one:\n" + "\n".join(found)


def test_every_top_level_module_has_a_layer():
    named = [member for _, members in LAYERS for member in members]
    assert len(named) == len(set(named)), "a module is in two layers"
    top_level = {name.split(".")[1] if "." in name else "__init__" for name in module_files(PACKAGE_DIR, "gpufleet")}
    assert top_level == set(named)


def test_the_graph_sees_the_package():
    """A walk that found nothing would pass the two tests above: it finds the modules and the
    imports between them that are known to exist."""
    imports = package_imports()
    modules = module_files(PACKAGE_DIR, "gpufleet")
    assert len(modules) > 150
    assert any(i.importer == "gpufleet.cli" and i.imported == "gpufleet.errors" for i in imports)


# -- the checker itself, on a tiny package written for the purpose


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "toy" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "toy"


TOY_LAYERS = (("low", ("__init__", "low")), ("high", ("high",)), ("cli", ("cli",)))


def test_the_checker_names_a_module_level_cycle_in_order(tmp_path):
    toy = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "from toy.low.b import B\n",
            "low/b.py": "from . import c\nB = 1\n",
            "low/c.py": "import toy.low.a as a\n",
            "low/d.py": "from .a import *\n",
        },
    )
    assert cycles(import_graph(toy, "toy")) == [["toy.low.a", "toy.low.b", "toy.low.c", "toy.low.a"]]


def test_the_checker_sees_a_cycle_through_an_import_inside_a_function(tmp_path):
    toy = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "from toy.low import b\n",
            "low/b.py": "def late():\n    from ..low.a import thing\n    return thing\n",
        },
    )
    assert cycles(import_graph(toy, "toy")) == [["toy.low.a", "toy.low.b", "toy.low.a"]]


def test_the_checker_sees_a_cycle_behind_type_checking(tmp_path):
    toy = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy.low.b import B\n",
            "low/b.py": "import toy.low.a\n",
        },
    )
    assert cycles(import_graph(toy, "toy")) == [["toy.low.a", "toy.low.b", "toy.low.a"]]


def test_the_checker_names_an_upward_import_with_file_line_and_layers(tmp_path):
    toy = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "import os\n\n\ndef f():\n    from toy.high.z import Z\n",
            "low/command.py": "from toy.high.z import Z\n",  # a command module is in the cli layer
            "high/__init__.py": "",
            "high/z.py": "from toy.low.a import f, os\nZ = 1\n",
        },
    )
    imports = import_graph(toy, "toy")
    assert upward_imports(imports, "toy", TOY_LAYERS) == [
        f"{toy / 'low' / 'a.py'}:5: toy.low.a (low) imports toy.high.z (high)"
    ]
    assert cycles(imports) == [["toy.high.z", "toy.low.a", "toy.high.z"]]


def test_the_checker_passes_a_clean_package(tmp_path):
    toy = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "from .a import A\n",
            "low/a.py": "A = 1\n",
            "high/__init__.py": "",
            "high/z.py": "from toy.low import A\nfrom ..low import a\nimport toy.low.a\n",
        },
    )
    imports = import_graph(toy, "toy")
    assert {(i.importer, i.imported) for i in imports} == {
        ("toy.low", "toy.low.a"),
        ("toy.high.z", "toy.low"),
        ("toy.high.z", "toy.low.a"),
    }
    assert cycles(imports) == []
    assert upward_imports(imports, "toy", TOY_LAYERS) == []
