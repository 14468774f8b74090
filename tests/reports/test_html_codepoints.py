"""Characters HTML forbids but XML allows (C1 controls, noncharacters) never reach the page.

Found by the strict parse in test_properties.py: a title holding U+0080 made the page a parse
error ("invalid codepoint") although the XML-invalid characters were already removed."""

from __future__ import annotations

from datetime import datetime, timezone

import html5lib
import pytest

from gpufleet.reports.document import Document, Paragraph, Section, Status
from gpufleet.reports.render import html


@pytest.mark.parametrize("char", ["\x80", "\x9f", "\ufdd0", "\ufdef", "\U0001fffe", "\U0010ffff"])
def test_a_character_html_forbids_is_dropped_from_the_page(char: str) -> None:
    doc = Document(kind="k", title=f"a{char}b", generated_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                   status=Status.OK, sections=[Section(title=f"s{char}", blocks=[Paragraph(text=f"p{char}q")])])
    page = html.render(doc)
    assert char not in page and "ab" in page and "pq" in page
    html5lib.HTMLParser(strict=True).parse(page)
