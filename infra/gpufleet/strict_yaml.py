"""YAML read strictly, with the line of every key: what a config file's errors need.

PyYAML's `safe_load` keeps the last of two equal keys (so a pasted block silently overrides the
first) and forgets where each value was written. This loader refuses a duplicate key, naming
both lines, and returns mappings that remember the line of each key (`LinedDict.lines`), so an
error found later by the schema can still say `file:line`. A document nested past what Python's
stack holds is a located error, not a RecursionError.
"""

from __future__ import annotations

from typing import Any, Iterable

import yaml

from gpufleet.errors import ConfigError


class LinedDict(dict[Any, Any]):
    """A mapping read from YAML: `lines[key]` is the 1-based line its key was written on."""

    lines: dict[Any, int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lines = {}


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first: int, again: int) -> None:
        super().__init__(f"key {key!r} appears twice (line {first} and line {again})")
        self.key, self.first, self.again = key, first, again


class _StrictLoader(yaml.SafeLoader):
    def construct_lined_mapping(self, node: yaml.MappingNode) -> Any:
        data = LinedDict()
        yield data
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are meant to be overridden
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, (list, dict)) and key in seen:
                raise _DuplicateKey(key, seen[key], line)
            if not isinstance(key, (list, dict)):
                seen[key] = line
        data.update(self.construct_mapping(node, deep=True))
        data.lines.update(seen)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_lined_mapping)


def load(text: str, *, source: str) -> Any:
    """One YAML document; a duplicate key, a syntax error or a too-deep nesting is a ConfigError."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        raise ConfigError(f"key {exc.key!r} appears twice (first on line {exc.first})",
                          path=source, line=exc.again, field=str(exc.key),
                          expected="each key once per mapping; YAML would silently keep the last") from None
    except RecursionError:
        raise ConfigError("nested too deeply to read", path=source,
                          expected="a config file of ordinary depth (mappings and lists a few levels deep)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"not valid YAML: {exc}", path=source,
                          line=mark.line + 1 if mark is not None else None) from None


def line_of(doc: Any, path: Iterable[Any]) -> int | None:
    """The line of the deepest key along `path` (keys and list indexes) that the file records."""
    line: int | None = None
    node = doc
    for part in path:
        if isinstance(node, LinedDict) and part in node:
            line = node.lines.get(part, line)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            break
    return line
