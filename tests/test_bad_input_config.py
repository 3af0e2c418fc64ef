"""Bad experiment files through the real command line: every section's fields given the wrong
type, a boolean for a number, a negative, zero, out-of-range, NaN or infinite value, unknown keys
in nested sections, variant overrides of unknown fields, settings that cannot work together, and
files that are not UTF-8, not YAML, or not a mapping.

Every case runs ``reproduce download`` (the cheapest command that reads an experiment file) and
must end with one line ``reproduce download: error: <file>: <field>: ...`` before any download;
the ``handled`` cases must load and mean what the file says (they reach the check of the
``--source`` asked for, which names the sources read from the file).
"""

from __future__ import annotations

import codecs
import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from reproduce.experiment_file import load_experiment
from tests.test_bad_input import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY_TEXT = (ROOT / "configs/tiny.yaml").read_text()
TINY = yaml.safe_load(TINY_TEXT)


def _set(path: str, value: object) -> Callable[[dict], None]:
    """An edit of the parsed tiny experiment: ``path`` (dots, list indices as numbers) set to
    ``value``, or removed when ``value`` is :data:`REMOVE`."""
    def edit(raw: dict) -> None:
        *parents, last = path.split(".")
        node = raw
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        key = int(last) if isinstance(node, list) else last
        if value is REMOVE:
            del node[key]
        else:
            node[key] = value
    return edit


REMOVE = object()
NAN, INF = float("nan"), float("inf")

# (id, edit of the parsed tiny experiment, what the error line names beside the file)
FIELD_CASES = [
    # model
    ("model-layers-zero", _set("model.layers", 0), ["model.layers", "greater than 0", "got 0"]),
    ("model-layers-negative", _set("model.layers", -1), ["model.layers", "got -1"]),
    ("model-layers-bool", _set("model.layers", True), ["model.layers", "valid integer"]),
    ("model-d_model-float", _set("model.d_model", 2.5), ["model.d_model", "got 2.5"]),
    ("model-heads-string", _set("model.heads", "8"), ["model.heads", "got '8'"]),
    ("model-dropout-one", _set("model.dropout", 1.0), ["model.dropout", "less than 1"]),
    ("model-dropout-nan", _set("model.dropout", NAN), ["model.dropout", "got nan"]),
    ("model-dropout-nan-string", _set("model.dropout", "NaN"), ["model.dropout", "'NaN'"]),
    ("model-label_smoothing-negative", _set("model.label_smoothing", -0.1),
     ["model.label_smoothing", "got -0.1"]),
    ("model-positional-unknown", _set("model.positional", "absolute"),
     ["model.positional", "'sinusoidal' or 'learned'"]),
    ("model-max_positions-zero", _set("model.max_positions", 0), ["model.max_positions"]),
    ("model-attention_radius-negative", _set("model.attention_radius", -1),
     ["model.attention_radius", "got -1"]),
    ("model-architecture-unknown", _set("model.architecture", "cnn"), ["model.architecture"]),
    ("model-section-not-a-mapping", _set("model", 5), ["model:", "valid dictionary"]),
    # training
    ("training-missing", _set("training", REMOVE), ["training: Field required"]),
    ("training-steps-zero", _set("training.steps", 0), ["training.steps", "got 0"]),
    ("training-steps-bool", _set("training.steps", True), ["training.steps", "got True"]),
    ("training-warmup-zero", _set("training.warmup_steps", 0), ["training.warmup_steps"]),
    ("training-lr_scale-nan", _set("training.lr_scale", NAN), ["training.lr_scale"]),
    ("training-lr_scale-infinite", _set("training.lr_scale", INF),
     ["training.lr_scale", "finite number"]),
    ("training-adam_beta1-above-one", _set("training.adam_beta1", 1.5),
     ["training.adam_beta1", "less than 1", "got 1.5"]),
    ("training-adam_beta2-negative", _set("training.adam_beta2", -1.0),
     ["training.adam_beta2", "got -1.0"]),
    ("training-adam_beta1-nan", _set("training.adam_beta1", NAN), ["training.adam_beta1"]),
    ("training-adam_eps-zero", _set("training.adam_eps", 0.0), ["training.adam_eps", "got 0.0"]),
    ("training-precision-unknown", _set("training.precision", "fp8"),
     ["training.precision", "'fp8'"]),
    ("training-clip_norm-zero", _set("training.clip_norm", 0), ["training.clip_norm"]),
    ("training-compile-string", _set("training.compile", "yes"), ["training.compile"]),
    ("training-micro_batches-zero", _set("training.micro_batches_per_step", 0),
     ["training.micro_batches_per_step"]),
    ("training-pass-below-a-pair", _set("training.max_tokens_per_device", 100),
     ["max_tokens_per_device (100)", "max_source_tokens (256)"]),
    ("training-seed-negative", _set("training.seed", -1), ["training.seed", "got -1"]),
    ("training-seed-beyond-64-bits", _set("training.seed", 2**64), ["training.seed",
                                                                     "less than 1844674407"]),
    ("training-seed-bool", _set("training.seed", True), ["training.seed", "got True"]),
    ("training-seeds-empty", _set("training.seed", []), ["training.seed", "at least 1 item"]),
    ("training-seeds-repeated", _set("training.seed", [1, 2, 1]),
     ["training.seed", "seed 1 listed twice"]),
    ("training-seeds-one-negative", _set("training.seed", [1, -2]),
     ["training.seed", "item 1", "greater than or equal to 0"]),
    ("training-seeds-one-string", _set("training.seed", [1, "2"]),
     ["training.seed", "item 1", "valid integer"]),
    ("variant-seeds-repeated", _set("variants.A_h1.training", {"seed": [3, 3]}),
     ["variants.A_h1.training: seed", "seed 3 listed twice"]),
    ("training-checkpoints-every_steps-zero", _set("training.checkpoints.every_steps", 0),
     ["training.checkpoints.every_steps"]),
    ("training-checkpoints-every_minutes-nan", _set("training.checkpoints.every_minutes", NAN),
     ["training.checkpoints.every_minutes"]),
    ("training-checkpoints-unknown-key", _set("training.checkpoints.evry_steps", 10),
     ["training.checkpoints.evry_steps: unknown key"]),
    ("training-average_last-zero", _set("training.average_last", 0), ["training.average_last"]),
    ("training-average_last-above-keep_last", _set("training.average_last", 7),
     ["checkpoints.keep_last (5) must be >= average_last (7)"]),
    ("training-steps-off-the-save-grid", _set("training.steps", 601),
     ["steps (601) must be a multiple of checkpoints.every_steps (20)"]),
    ("training-average_last-above-saved", lambda raw: raw["training"].update(
        steps=100, checkpoints={"every_steps": 50, "every_minutes": 0, "keep_last": 5}),
     ["average_last (5) is more than the 2 checkpoints"]),
    ("training-cuda_graphs-without-pass_buckets", _set("training.cuda_graphs", True),
     ["cuda_graphs records a graph per pass shape", "pass_buckets: true"]),
    ("training-cuda_graphs-uncompiled", lambda raw: raw["training"].update(
        cuda_graphs=True, pass_buckets=True, compile=False),
     ["cuda_graphs records a graph per pass shape", "compile: auto or true"]),
    ("training-attention-flex-uncompiled", lambda raw: raw["training"].update(
        attention="flex", compile=False, pass_buckets=True),
     ["attention flex needs compile: auto or true", "every query of a pass against every key"]),
    ("training-attention-flex-without-pass_buckets", _set("training.attention", "flex"),
     ["attention flex needs", "pass_buckets: true", "symbolic sizes"]),
    ("training-attention-unknown", _set("training.attention", "flash"),
     ["training.attention", "'flash'"]),
    # decoding
    ("decoding-precision-unknown", _set("decoding.precision", "int8"),
     ["decoding.precision", "'int8'"]),
    ("decoding-beam-zero", _set("decoding.beam_size", 0), ["decoding.beam_size"]),
    ("decoding-length_penalty-negative", _set("decoding.length_penalty", -1),
     ["decoding.length_penalty"]),
    ("decoding-length_penalty-infinite", _set("decoding.length_penalty", INF),
     ["decoding.length_penalty", "finite number"]),
    ("decoding-max_length_offset-negative", _set("decoding.max_length_offset", -1),
     ["decoding.max_length_offset"]),
    ("decoding-unknown-key", _set("decoding.beam", 4), ["decoding.beam: unknown key"]),
    ("decoding-max_source_pieces-zero", _set("decoding.max_source_pieces", 0),
     ["decoding.max_source_pieces", "greater than 0", "got 0"]),
    ("decoding-max_source_pieces-fraction", _set("decoding.max_source_pieces", 512.5),
     ["decoding.max_source_pieces", "got 512.5"]),
    ("variant-decoding-max_source_pieces-negative",
     _set("variants.base.decoding.max_source_pieces", -1),
     ["variants.base.decoding: max_source_pieces", "got -1"]),
    # bpe
    ("bpe-vocab_size-zero", _set("bpe.vocab_size", 0), ["bpe.vocab_size"]),
    ("bpe-vocab_size-string", _set("bpe.vocab_size", "32k"), ["bpe.vocab_size", "'32k'"]),
    ("bpe-character_coverage-above-one", _set("bpe.character_coverage", 1.5),
     ["bpe.character_coverage"]),
    ("bpe-model_type-unknown", _set("bpe.model_type", "word"), ["bpe.model_type"]),
    # data
    ("data-train-empty-list", _set("data.train", []), ["data.train", "at least 1 item"]),
    ("data-cleaning-max_length_ratio-below-one", _set("data.cleaning.max_length_ratio", 0.5),
     ["data.cleaning.max_length_ratio"]),
    ("data-cleaning-normalization-unknown", _set("data.cleaning.unicode_normalization", "NFD"),
     ["data.cleaning.unicode_normalization"]),
    ("data-cleaning-unknown-key", _set("data.cleaning.max_len", 5),
     ["data.cleaning.max_len: unknown key"]),
    ("data-min_pairs-zero", _set("data.min_pairs", 0), ["data.min_pairs"]),
    ("data-download-deadline-nan", _set("data.download.deadline_minutes", NAN),
     ["data.download.deadline_minutes"]),
    ("data-download-min-rate-negative", _set("data.download.min_rate_bytes_per_second", -1),
     ["data.download.min_rate_bytes_per_second"]),
    ("data-download-unknown-key", _set("data.download.retries", 3),
     ["data.download.retries: unknown key"]),
    ("data-source-url-scheme", _set("data.train.0.url", "ftp://example.org/a.tgz"),
     ["data.train.0.url", "http://, https:// or file:"]),
    ("data-source-sha256-short", _set("data.train.0.sha256", "abc"), ["data.train.0.sha256"]),
    ("data-source-format-unknown", _set("data.train.0.format", "csv"), ["data.train.0.format"]),
    ("data-source-name-with-space", _set("data.train.0.name", "a b"), ["data.train.0.name"]),
    ("data-source-one-member-only", _set("data.train.0.target_member", REMOVE),
     ["data.train.0", "text sources read each side from its own file"]),
    ("data-source-text-without-members",
     lambda raw: _set("data.train.0.source_member", REMOVE)(raw)
     or _set("data.train.0.target_member", REMOVE)(raw),
     ["data.train.0", "text sources read each side from its own file", "pair every sentence "
      "with itself"]),
    ("data-source-sgm-one-member-twice",
     lambda raw: raw["data"]["dev"][0].update(target_member=raw["data"]["dev"][0]["source_member"]),
     ["data.dev.0", "sgm sources read each side from its own file"]),
    ("data-mirror-one-name-two-urls",
     lambda raw: raw["data"].update(mirror_dir="mirror") or raw["data"]["dev"][0].update(
         url="file:elsewhere/tiny_corpus.tgz"),
     ["data: mirror_dir: file:configs/data/tiny_corpus.tgz and file:elsewhere/tiny_corpus.tgz "
      "end in the same file name 'tiny_corpus.tgz'"]),
    ("data-source-unknown-key", _set("data.dev.0.checksum", "x"),
     ["data.dev.0.checksum: unknown key"]),
    ("data-source-treebank-in-translation",
     lambda raw: raw["data"]["test"][0].update(format="ptb", target_member=None),
     ["data.test.0.format", "translation experiment"]),
    # variants
    ("variants-empty", _set("variants", {}), ["variants", "at least 1 item"]),
    ("variant-overrides-unknown-model-field", _set("variants.A_h1.model.head", 1),
     ["variants.A_h1.model: head: unknown key"]),
    ("variant-overrides-unknown-section", _set("variants.base.data", {"min_pairs": 1}),
     ["variants.base.data: unknown key"]),
    ("variant-override-out-of-range", _set("variants.base.model.heads", 0),
     ["variants.base.model: heads", "got 0"]),
    ("variant-override-wrong-type", _set("variants.A_h1.model.heads", "two"),
     ["variants.A_h1.model: heads", "'two'"]),
    ("variant-override-breaks-averaging", _set("variants.big.training", {"average_last": 9}),
     ["variants.big.training", "keep_last (5) must be >= average_last (9)"]),
    ("variant-is-null", _set("variants.base", None), ["variants.base", "got None"]),
    ("variant-name-with-dash", _set("variants.A-h2", {}), ["variant name 'A-h2'"]),
    ("variant-rnn-with-attention-radius", _set("variants.rnn.model.attention_radius", 2),
     ["variants.rnn.model", "attention_radius"]),
    # tables, scoring, top level
    ("tables-table2-unknown-variant", _set("tables.table2.base", "nope"),
     ["tables.table2.base names unknown variant 'nope'"]),
    ("tables-table2-unknown-role", _set("tables.table2.small", "base"), ["tables.table2.small"]),
    ("tables-gpu-flops-zero", _set("tables.gpu_flops_per_second", 0),
     ["tables.gpu_flops_per_second"]),
    ("scoring-unknown-key", _set("scoring.compound", True), ["scoring.compound: unknown key"]),
    ("name-with-space", _set("name", "my tiny"), ["name:", "'my tiny'"]),
    ("name-missing", _set("name", REMOVE), ["name: Field required"]),
    ("task-unknown", _set("task", "tagging"), ["task:", "'tagging'"]),
    ("top-level-unknown-key", _set("modle", {}), ["modle: unknown key"]),
    ("resources-section", _set("resources", {"gpus": 1}), ["resources: unknown key"]),
]


def _tiny_text_with(text: str) -> Callable[[Path], bytes]:
    return lambda _: text.encode()


# (id, bytes of the file, what the error line names beside the file)
TEXT_CASES = [
    ("yaml-empty-file", b"", ["expected a mapping of keys at the top level"]),
    ("yaml-a-list", b"- name: tiny\n", ["expected a mapping of keys at the top level"]),
    ("yaml-not-utf8", TINY_TEXT.replace("tiny analogue", "tiny analogu\xe9").encode("latin-1"),
     ["not UTF-8", "line"]),
    ("yaml-duplicate-top-level-key", (TINY_TEXT + "name: other\n").encode(),
     ["key 'name' given twice"]),
    ("yaml-duplicate-variant", (TINY_TEXT + "  base:\n    description: again\n").encode(),
     ["key 'base' given twice"]),
    ("yaml-tab-indentation", TINY_TEXT.replace("  layers: 2", "\tlayers: 2").encode(),
     ["not valid YAML", "line"]),
    ("yaml-unclosed-bracket", TINY_TEXT.replace("{heads: 1,", "{heads: 1").replace(
        "d_v: 64}", "d_v: 64").encode(), ["not valid YAML", "line"]),
    ("yaml-nul-byte", TINY_TEXT.replace("name: tiny", "name: ti\0ny").encode(),
     ["not valid YAML"]),
    ("yaml-python-tag", (TINY_TEXT + "x: !!python/object/apply:os.system ['true']\n").encode(),
     ["not valid YAML", "python/object"]),
]


def _download(experiment: Path, tmp_path: Path) -> list:
    return ["--experiment", experiment, "--split", "train", "--source", "nope",
            "--out-dir", tmp_path / "downloads"]


@pytest.mark.parametrize("edit, named", [case[1:] for case in FIELD_CASES],
                         ids=[case[0] for case in FIELD_CASES])
def test_bad_input_is_one_clear_line(tmp_path, edit, named):
    raw = copy.deepcopy(TINY)
    edit(raw)
    experiment = tmp_path / "edited.yaml"
    experiment.write_text(yaml.safe_dump(raw))
    result = run_cli("download", *_download(experiment, tmp_path), cwd=tmp_path)
    assert_one_line_error(result, "download", f"{experiment}: ", *named)
    assert not (tmp_path / "downloads").exists()


@pytest.mark.parametrize("content, named", [case[1:] for case in TEXT_CASES],
                         ids=[case[0] for case in TEXT_CASES])
def test_bad_input_file_is_one_clear_line(tmp_path, content, named):
    experiment = tmp_path / "bad.yaml"
    experiment.write_bytes(content)
    result = run_cli("download", *_download(experiment, tmp_path), cwd=tmp_path)
    assert_one_line_error(result, "download", str(experiment), *named)


# Handled correctly: the file loads, and means exactly what the shipped tiny experiment means.
HANDLED_CASES = [
    ("yaml-byte-order-mark", codecs.BOM_UTF8 + TINY_TEXT.encode()),
    ("yaml-crlf-line-ends", TINY_TEXT.replace("\n", "\r\n").encode()),
    ("yaml-exponent-without-dot", TINY_TEXT.replace(
        "training:\n", "training:\n  adam_eps: 1e-9\n").encode()),
]


@pytest.mark.parametrize("content", [case[1] for case in HANDLED_CASES],
                         ids=[case[0] for case in HANDLED_CASES])
def test_bad_input_is_handled_correctly(tmp_path, content):
    experiment = tmp_path / "odd.yaml"
    experiment.write_bytes(content)
    assert load_experiment(experiment) == load_experiment(ROOT / "configs/tiny.yaml")
    result = run_cli("download", *_download(experiment, tmp_path), cwd=tmp_path)
    assert_one_line_error(result, "download", "no source named 'nope'", "(known: tiny_train)")
