"""Write a report in several formats at once, each file atomically.

Why render everything before writing anything: a report that fails to render in one format
must not leave the other formats of a new run next to the stale files of the last one. Why
temp + rename: a CI step uploading `reports/<stack>/` while a rollout rewrites it must see either
the old file or the new one, never half of one. Callers pass `Project.reports_dir(stack)`.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, SerializeAsAny, TypeAdapter

from gpufleet.durable import write_atomic
from gpufleet.masking import mask
from gpufleet.errors import ConfigError
from gpufleet.reports.document import Document
from gpufleet.reports.render import html, junit, markdown

FORMATS = ("json", "md", "xml", "html")
SUFFIX = {"json": ".json", "md": ".md", "xml": "-junit.xml", "html": ".html"}
"""File name after the basename: `rollout.json`, `rollout.md`, `rollout-junit.xml`, `rollout.html`."""

Source = BaseModel | Sequence[BaseModel]
_MODELS = TypeAdapter(list[SerializeAsAny[BaseModel]])  # each item by its own class, in pydantic's Rust core


def source_json(source: Source) -> str:
    """The source model's own JSON (the versioned truth); a sequence of models as a JSON array."""
    if isinstance(source, BaseModel):
        return source.model_dump_json(indent=2) + "\n"
    return _MODELS.dump_json(list(source), indent=2).decode("utf-8") + "\n"


def render_all(document: Document, source: Source, formats: Iterable[str], basename: str = "report",
               md_limit: int = markdown.STEP_SUMMARY_LIMIT) -> dict[str, str]:
    """Format -> text for each requested format; ConfigError naming an unknown one.

    A Markdown summary cut to `md_limit` bytes names the files next to it that hold everything.
    """
    wanted = list(dict.fromkeys(formats))
    unknown = [f for f in wanted if f not in SUFFIX]
    if unknown:
        raise ConfigError(f"unknown report format(s) {', '.join(unknown)}", field="formats",
                          expected="any of " + ", ".join(FORMATS))
    full = " and ".join(f"{basename}{SUFFIX[f]}" for f in ("html", "json") if f in wanted) or "the JSON report"
    renderers: dict[str, Callable[[], str]] = {
        "json": lambda: source_json(source), "md": lambda: markdown.render(document, md_limit, full),
        "xml": lambda: junit.render(document), "html": lambda: html.render(document)}
    return {f: renderers[f]() for f in wanted}


def write_report(document: Document, source: Source, out_dir: Path, basename: str,
                 formats: Iterable[str] = FORMATS, md_limit: int = markdown.STEP_SUMMARY_LIMIT) -> dict[str, Path]:
    """Render `document` (and `source` for JSON) in `formats`, then write `out_dir/basename*`.

    `md_limit`: bytes of Markdown (a step summary by default; `markdown.COMMENT_LIMIT` for a PR
    comment). Returns format -> path written.
    """
    if not basename or "/" in basename or basename.startswith("."):
        raise ConfigError(f"bad report name {basename!r}", field="basename", expected="a plain file name stem")
    texts = render_all(document, source, formats, basename, md_limit)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for fmt, text in texts.items():
        path = out_dir / f"{basename}{SUFFIX[fmt]}"
        write_atomic(path, mask(text))  # a secret quoted anywhere in a report (a reason, evidence) never lands
        written[fmt] = path
    return written
