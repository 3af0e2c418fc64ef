"""Archives in the statmt layout, built by the tests (tgz with nested folders, SGM dev/test)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def write_tgz(path: Path, members: dict[str, str]) -> Path:
    return write_tgz_bytes(path, {name: text.encode("utf-8") for name, text in members.items()})


def write_tgz_bytes(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def sgm(kind: str, sentences: list[str]) -> str:
    segments = "\n".join(f'<seg id="{i}">{s}</seg>' for i, s in enumerate(sentences, start=1))
    return (f'<{kind} setid="newstest2013" srclang="any">\n<doc docid="d1" genre="news">\n'
            f'{segments}\n</doc>\n</{kind}>\n')


def wmt_like_members() -> dict[str, str]:
    english = ["A small house .", "The cat sleeps .", "", "x " * 300, "Hello world ."]
    german = ["Ein kleines Haus .", "Die Katze schläft .", "Leer", "y " * 300,
              "Hallo Welt , wie geht es dir heute morgen hier ?"]
    return {
        "training/europarl-v7.de-en.en": "".join(line + "\n" for line in english),
        "training/europarl-v7.de-en.de": "".join(line + "\n" for line in german),
        "dev/newstest2013-src.en.sgm": sgm("srcset", ["Good morning .", "R&amp;D &lt;rocks&gt;"]),
        "dev/newstest2013-ref.de.sgm": sgm("refset",
                                           ["Guten Morgen .", "F&amp;E &quot;rockt&quot;"]),
    }
