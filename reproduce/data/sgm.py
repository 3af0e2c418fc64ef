"""WMT's SGM files (newstest dev and test sets): ``<seg id="1">text</seg>`` inside ``<doc>``s.

Only the text of ``<seg>`` elements is kept, in file order; entities (``&amp;``, ``&lt;``,
``&quot;``, ``&#39;``...) are unescaped and surrounding whitespace is stripped.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from reproduce.errors import DataError
from reproduce.files import read_text

_SEGMENT = re.compile(r"<seg\b[^>]*>(.*?)</seg\s*>", re.IGNORECASE | re.DOTALL)


def parse_sgm_text(text: str) -> list[str]:
    return [" ".join(html.unescape(match).split()) for match in _SEGMENT.findall(text)]


def read_sgm(path: Path, label: str | None = None) -> list[str]:
    """The segments of ``path``; ``label`` names the file in errors (e.g. an archive member)."""
    segments = parse_sgm_text(read_text(path, label))
    if not segments:
        raise DataError(f"{label or path}: no <seg> elements found; is it an SGM file?")
    return segments
