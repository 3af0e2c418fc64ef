"""The model interface is explicit and the package's imports have no cycle.

A cycle, even one only type annotations close (``if TYPE_CHECKING:``), means two modules cannot be
understood or changed one without the other; the one between the Transformer and the base class
of both models is why :class:`DecoderCache` and :class:`TranslationModel` live in
``reproduce/model/encoder_decoder.py``. Imports are read with :mod:`ast`, the ``TYPE_CHECKING``
ones included, so that a cycle is found whether or not it breaks at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reproduce.config import ModelConfig
from reproduce.model.architectures import build_model
from reproduce.model.encoder_decoder import TranslationModel

PACKAGE = Path(__file__).resolve().parents[1] / "reproduce"
# The modules that may import a model's own module: the one that builds models, and inspection,
# which walks the Transformer's layers (Figures 3-5 exist for the Transformer alone).
BUILDS_MODELS = {"reproduce.model.architectures", "reproduce.model.inspection"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (anywhere in the file)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module)
                imported |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        graph[name] = {module for module in imported if module in modules and module != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for successor in sorted(graph[node]):
            if state.get(successor) == "open":
                return path[path.index(successor):] + [node, successor]
            if successor not in state and (cycle := visit(successor, path + [node])):
                return cycle
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node, [])):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_the_cycle_check_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_model_builder_imports_a_models_module():
    """Everything else names :class:`TranslationModel`, whichever model it is handed."""
    models = {"reproduce.model.transformer", "reproduce.model.recurrent"}
    importers = {name for name, imported in import_graph().items() if imported & models}
    assert importers - BUILDS_MODELS - models == set()


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_both_models_provide_the_translation_model_interface(architecture):
    config = ModelConfig(architecture=architecture, layers=1, d_model=16, d_ff=32, heads=2)
    model = build_model(config, vocab_size=20)
    members = {name for name in dir(TranslationModel) if not name.startswith("_")}
    members |= set(TranslationModel.__annotations__)  # the data attributes
    assert members >= {"config", "vocab_size", "embedding", "encode", "decoder_states"}
    assert [name for name in sorted(members) if not hasattr(model, name)] == []
