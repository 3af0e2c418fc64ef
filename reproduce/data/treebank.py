"""Penn Treebank sources (``format: ptb``, paper section 6.3): the cleaned trees of every file a
source names, in order.

A source names one tree file (an archive member, or the download itself) or a glob over the
archive's members (:func:`reproduce.data.archives.matching_members`), e.g. WSJ section 23 as
``treebank_3/parsed/mrg/wsj/23/*.mrg``. Each file is read strictly (UTF-8, well-formed trees,
errors naming the member, tree and line) and each tree cleaned as parsing papers do
(:func:`reproduce.parsing.trees.clean_tree`). Preparation turns the trees into sentence pairs;
``reproduce references`` writes them as the gold trees EVALB scores against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from reproduce.config import Source
from reproduce.data.archives import extract_member, matching_members, member_label
from reproduce.files import read_text
from reproduce.parsing.trees import Tree, TreeError, clean_tree, read_trees


def read_source_trees(source: Source, archive: Path, scratch: Path) -> Iterator[Tree]:
    """The cleaned trees of ``source`` (downloaded as ``archive``), file after file."""
    members = ([None] if source.source_member is None
               else matching_members(archive, source.source_member))
    for index, member in enumerate(members):
        path = extract_member(archive, member, scratch / f"{source.name}.{index}.mrg")
        label = member_label(archive, member)
        for number, tree in enumerate(read_trees(read_text(path, label), label), start=1):
            try:
                yield clean_tree(tree)
            except TreeError as error:
                raise TreeError(f"{label} tree {number}: {error}") from None
        path.unlink()
