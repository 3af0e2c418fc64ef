"""WMT's SGM files (newstest dev and test sets): ``<seg id="1">text</seg>`` inside ``<doc>``s.

Only the text of ``<seg>`` elements is kept, in file order; entities (``&amp;``, ``&lt;``,
``&quot;``, ``&#39;``...) are unescaped and surrounding whitespace is stripped.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

_SEGMENT = re.compile(r"<seg\b[^>]*>(.*?)</seg\s*>", re.IGNORECASE | re.DOTALL)


def parse_sgm_text(text: str) -> list[str]:
    return [" ".join(html.unescape(match).split()) for match in _SEGMENT.findall(text)]


def read_sgm(path: Path) -> list[str]:
    segments = parse_sgm_text(path.read_text(encoding="utf-8"))
    if not segments:
        raise ValueError(f"{path}: no <seg> elements found; is it an SGM file?")
    return segments
