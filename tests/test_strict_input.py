"""Input that used to pass silently or fail vaguely: duplicate YAML keys, booleans and strings
where numbers belong, out-of-range seeds, a non-UTF-8 experiment file, a byte order mark at the
start of a corpus, and JSON files that are not JSON. Each error is one line naming the file and
the key (or line)."""

from __future__ import annotations

import codecs
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reproduce.config import Cleaning, ConfigError, Source
from reproduce.experiment_file import load_experiment, read_yaml
from reproduce.data.download import file_name
from reproduce.data.encoded import EncodedCorpus
from reproduce.data.prepare import prepare_split
from reproduce.errors import DataError
from reproduce.files import read_lines
from tests.corpus_archives import sgm, write_tgz_bytes
from tests.project_copy import copy_workflow
from tests.training_fixtures import write_encoded
from tests.test_bad_input import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = (ROOT / "configs/tiny.yaml").read_text()


def _line_of(text: str, line: str) -> int:
    """The 1-based number of the only line of ``text`` equal to ``line``."""
    numbers = [number for number, held in enumerate(text.splitlines(), start=1) if held == line]
    assert len(numbers) == 1, line
    return numbers[0]


def _tiny_with(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


def _tiny_edited(tmp_path: Path, section: str, key: str, value: object) -> Path:
    raw = yaml.safe_load(TINY)
    node = raw
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[key] = value
    return _tiny_with(tmp_path, yaml.safe_dump(raw))


# --------------------------------------------------------------------------------------------
# Reading an experiment file: duplicate keys, YAML syntax, encoding
# --------------------------------------------------------------------------------------------
def test_a_top_level_key_given_twice_names_the_file_the_key_and_both_lines(tmp_path):
    text = TINY + "name: other\n"
    first, second = _line_of(text, "name: tiny"), len(text.splitlines())
    with pytest.raises(ConfigError) as raised:
        load_experiment(_tiny_with(tmp_path, text))
    assert re.fullmatch(rf"\S*bad\.yaml line {second} column 1: not valid YAML: .*key 'name' "
                        rf"given twice, at lines {first} and {second}.*", str(raised.value))


def test_a_nested_key_given_twice_is_refused_too(tmp_path):
    text = TINY.replace("  dropout: 0.1\n", "  dropout: 0.1\n  dropout: 0.3\n")
    first = _line_of(text, "  dropout: 0.1")
    with pytest.raises(ConfigError, match=rf"key 'dropout' given twice, at lines {first} and "
                                          rf"{first + 1}"):
        load_experiment(_tiny_with(tmp_path, text))


def test_a_key_merged_in_by_an_anchor_may_still_be_overridden(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("base: &base {dropout: 0.1, heads: 8}\nbig:\n  <<: *base\n  dropout: 0.3\n")
    assert read_yaml(path)["big"] == {"dropout": 0.3, "heads": 8}


def test_invalid_yaml_is_one_line_naming_the_file_and_the_line(tmp_path):
    text = TINY.replace("  heads: 4\n", "  heads: [4\n")
    line = _line_of(text, "  heads: [4")
    with pytest.raises(ConfigError) as raised:
        load_experiment(_tiny_with(tmp_path, text))
    message = str(raised.value)
    assert "\n" not in message and re.match(r"\S*bad\.yaml line \d+ column \d+: not valid YAML",
                                            message), message
    assert int(re.search(r"line (\d+)", message)[1]) > line


def test_an_exponent_without_a_dot_is_a_float(tmp_path):
    experiment = load_experiment(_tiny_with(tmp_path, TINY.replace(
        "  warmup_steps: 150\n", "  warmup_steps: 150\n  adam_eps: 1e-9\n")))
    assert experiment.training.adam_eps == 1e-9


def test_an_exponent_without_a_sign_is_a_float(tmp_path):
    """``9.5e12`` (the paper's P100 rate) has no exponent sign: YAML 1.1 reads it as a string,
    which the strict float field would refuse; the loader reads it as YAML 1.2 does."""
    experiment = load_experiment(_tiny_with(tmp_path, TINY.replace(
        "tables:\n", "tables:\n  gpu_flops_per_second: 9.5e12\n")))
    assert experiment.tables.gpu_flops_per_second == 9.5e12


def test_a_non_utf8_experiment_file_names_the_file_and_the_line(tmp_path):
    described = "    description: the tiny analogue of the base model"
    text, line = TINY.replace(described, described + " \udcff"), _line_of(TINY, described)
    path = tmp_path / "bad.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConfigError, match=rf"^\S*bad\.yaml line {line}: not UTF-8 \(bytes ff\)"):
        load_experiment(path)


def test_a_non_utf8_experiment_file_is_one_line_on_the_command_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: tiny\nsource_lang: \xe9\n")
    result = run_cli("prepare", "--experiment", path, "--split", "dev", "--downloads", tmp_path,
                     "--out-dir", tmp_path / "out", cwd=tmp_path)
    assert_one_line_error(result, "prepare", "bad.yaml line 2: not UTF-8")


# --------------------------------------------------------------------------------------------
# Numbers are numbers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("section", "key", "value", "named"), [
    ("model", "layers", True, "model.layers"),
    ("model", "layers", "6", "model.layers"),
    ("model", "dropout", True, "model.dropout"),
    ("model", "dropout", "0.1", "model.dropout"),
    ("training", "steps", True, "training.steps"),
    ("decoding", "beam_size", "4", "decoding.beam_size"),
    ("bpe", "vocab_size", 600.0, "bpe.vocab_size"),
    ("variants.A_h1.model", "heads", True, "variants.A_h1.model: heads"),
    ("variants.A_h1.training", "warmup_steps", "100", "variants.A_h1.training: warmup_steps"),
])
def test_a_boolean_or_a_string_where_a_number_belongs_is_refused(tmp_path, section, key, value,
                                                                 named):
    path = _tiny_edited(tmp_path, section, key, value)
    expected = rf"^\S*bad\.yaml: {re.escape(named)}: Input should be a valid \w+ \(got {{}}\)$"
    with pytest.raises(ConfigError, match=expected.format(re.escape(repr(value)))):
        load_experiment(path)


def test_a_float_field_still_takes_an_integer(tmp_path):
    path = _tiny_edited(tmp_path, "variants.D_ls0.model", "dropout", 0)
    experiment = load_experiment(path)
    assert experiment.variant("D_ls0").model.dropout == 0.0
    assert experiment.variant("D_ls0").model.label_smoothing == 0.0


@pytest.mark.parametrize("name", sorted(path.stem for path in (ROOT / "configs").glob("*.yaml")))
def test_every_shipped_experiment_and_variant_loads_strictly(name):
    experiment = load_experiment(ROOT / f"configs/{name}.yaml")
    for variant in experiment.variants:
        experiment.variant(variant)


# --------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("section", "seed", "expected"), [
    ("training", -1, "greater than or equal to 0"),
    ("training", 2**64, "less than 18446744073709551616"),
    ("bpe", -1, "greater than or equal to 0"),
    ("bpe", 2**32, "less than 4294967296"),
])
def test_a_seed_out_of_range_is_refused_naming_the_field(tmp_path, section, seed, expected):
    path = _tiny_edited(tmp_path, section, "seed", seed)
    with pytest.raises(ConfigError, match=rf"^\S*bad\.yaml: {section}\.seed: Input should be "
                                          rf"{expected} \(got {seed}\)$"):
        load_experiment(path)


@pytest.mark.parametrize(("section", "seed"), [("training", 2**64 - 1), ("bpe", 2**32 - 1)])
def test_the_largest_seeds_are_accepted(tmp_path, section, seed):
    path = _tiny_edited(tmp_path, section, "seed", seed)
    assert getattr(load_experiment(path), section).seed == seed


# --------------------------------------------------------------------------------------------
# A byte order mark opening a corpus
# --------------------------------------------------------------------------------------------
PAIRS = [("Hello world .", "Hallo Welt ."), ("A small house .", "Ein kleines Haus .")]


def _corpus_members(fmt: str, bom: bytes) -> dict[str, bytes]:
    """One source's members in ``fmt``, each file opening with ``bom``."""
    sources, targets = [pair[0] for pair in PAIRS], [pair[1] for pair in PAIRS]
    if fmt == "tsv":
        return {"corpus.tsv": bom + "".join(f"{s}\t{t}\n" for s, t in PAIRS).encode()}
    if fmt == "ptb":
        return {"corpus.tsv": bom + b"( (S (INTJ (UH Hello)) (NP (NN world)) (. .)) )\n"
                                    b"( (NP (DT A) (JJ small) (NN house) (. .)) )\n"}
    if fmt == "sgm":
        return {"corpus.src": bom + sgm("srcset", sources).encode(),
                "corpus.tgt": bom + sgm("refset", targets).encode()}
    return {"corpus.src": bom + "".join(s + "\n" for s in sources).encode(),
            "corpus.tgt": bom + "".join(t + "\n" for t in targets).encode()}


def _prepared(folder: Path, fmt: str, bom: bytes) -> tuple[str, str]:
    members = {"source_member": "corpus.tsv"} if fmt in ("tsv", "ptb") else {
        "source_member": "corpus.src", "target_member": "corpus.tgt"}
    source = Source(name="corpus", url="file:x/corpus.tgz", format=fmt, **members)
    write_tgz_bytes(folder / "downloads" / file_name(source), _corpus_members(fmt, bom))
    prepare_split([source], "dev", folder / "downloads", folder / "data", Cleaning())
    return tuple((folder / f"data/dev.{side}").read_text(encoding="utf-8")
                 for side in ("src", "tgt"))


@pytest.mark.parametrize("fmt", ["text", "tsv", "sgm", "ptb"])
def test_a_byte_order_mark_leaves_the_prepared_corpus_unchanged(tmp_path, fmt):
    with_bom = _prepared(tmp_path / "bom", fmt, codecs.BOM_UTF8)
    assert with_bom == _prepared(tmp_path / "plain", fmt, b"")
    assert with_bom[0].startswith("Hello world .\n")


def test_a_byte_order_mark_is_not_part_of_the_first_source_sentence_to_decode(tmp_path):
    path = tmp_path / "source.txt"
    path.write_bytes(codecs.BOM_UTF8 + "Hello world .\n\ufeffkept inside a line\n".encode())
    assert read_lines(path) == ["Hello world .", "\ufeffkept inside a line"]


# --------------------------------------------------------------------------------------------
# JSON files that are not JSON
# --------------------------------------------------------------------------------------------
def test_a_scores_file_that_is_not_json_is_one_line_naming_it(tmp_path):
    (tmp_path / "dev.json").write_text('{"bleu": 1.0}\n')
    (tmp_path / "test.json").write_text('{"bleu": 1.0,\n oops}\n')
    result = run_cli("summarize", "--dataset", "tiny", "--variant", "base", "--seed", "1",
                     "--dev", "dev.json",
                     "--test", "test.json", "--out", "out.json", cwd=tmp_path)
    assert_one_line_error(result, "summarize", "test.json line 2 column 2: not JSON")
    assert not (tmp_path / "out.json").exists()


def test_an_encoded_corpus_whose_meta_json_is_not_json_is_named(tmp_path):
    write_encoded(tmp_path / "encoded", vocab_size=8, pairs=[([1, 2], [3])])
    (tmp_path / "encoded/meta.json").write_text("vocab_size: 8\n")
    with pytest.raises(DataError, match=r"^\S*encoded/meta\.json line 1 column 1: not JSON"):
        EncodedCorpus.open(tmp_path / "encoded")


# --------------------------------------------------------------------------------------------
# The pipeline: Snakemake's config and the experiments it lists
# --------------------------------------------------------------------------------------------
def _plan(workflow: Path, pipeline: str) -> subprocess.CompletedProcess:
    """``snakemake -n`` of the default target in a copy of the workflow, with ``pipeline`` as
    the pipeline config file."""
    (workflow / "pipeline.yaml").write_text(pipeline)
    command = [str(Path(sys.executable).parent / "snakemake"), "-n", "--configfile=pipeline.yaml"]
    return subprocess.run(command, cwd=workflow, capture_output=True, text=True, timeout=300)


def test_two_experiment_files_of_one_name_are_refused_naming_both(tmp_path):
    workflow = copy_workflow(tmp_path / "workflow")
    (workflow / "configs/tiny_again.yaml").write_text(TINY)
    result = _plan(workflow, "experiments: [configs/tiny.yaml, configs/tiny_again.yaml]\n"
                             "results: results\ntraining: {launcher: inline}\n")
    assert result.returncode != 0
    assert ("Invalid experiment configuration: configs/tiny.yaml and configs/tiny_again.yaml "
            "are both named 'tiny'") in result.stderr, result.stderr


def test_an_invalid_experiment_file_is_refused_in_one_line_naming_it(tmp_path):
    """Snakemake loads every listed experiment before planning: a bad one stops it with the
    loader's line (file, key, value), not a traceback out of the Snakefile."""
    workflow = copy_workflow(tmp_path / "workflow")
    (workflow / "configs/bad.yaml").write_text(TINY.replace("  layers: 2\n", "  layers: 0\n"))
    result = _plan(workflow, "experiments: [configs/tiny.yaml, configs/bad.yaml]\n"
                             "results: results\ntraining: {launcher: inline}\n")
    assert result.returncode != 0
    assert re.search(r"^Invalid experiment configuration: configs/bad\.yaml: model\.layers: "
                     r"Input should be greater than 0 \(got 0\)$", result.stderr,
                     re.MULTILINE), result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr


def test_a_pipeline_config_key_given_twice_is_refused(tmp_path):
    workflow = copy_workflow(tmp_path / "workflow")
    result = _plan(workflow, "experiments: [configs/tiny.yaml]\nresults: results\n"
                             "training: {launcher: inline}\nresults: elsewhere\n")
    assert result.returncode != 0
    assert re.search(r"^Invalid pipeline configuration: \S*/pipeline\.yaml line 4 column 1: not "
                     r"valid YAML: key 'results' given twice, at lines 2 and 4", result.stderr,
                     re.MULTILINE), result.stderr


# (id, the pipeline config's lines, what the schema's refusal says): a typo or an impossible
# value in the pipeline config is refused before anything is planned, instead of being ignored
# (a misspelled key leaves its default in force) or failing a job hours later.
SCHEMA_CASES = [
    ("unknown-training-key", "training: {launcher: inline, treads: 4}",
     "Additional properties are not allowed ('treads' was unexpected)"),
    ("unknown-top-level-key", "training: {launcher: inline}\nresult: elsewhere",
     "Additional properties are not allowed ('result' was unexpected)"),
    ("unknown-launcher", "training: {launcher: submitit}", "'submitit' is not one of"),
    ("no-task", "training: {launcher: local, tasks: 0}", "0 is less than the minimum of 1"),
    ("no-thread", "training: {launcher: inline, threads: 0}", "0 is less than the minimum of 1"),
    ("no-experiment", "training: {launcher: inline}\nexperiments: []", "[] should be non-empty"),
    ("experiment-not-a-path", "training: {launcher: inline}\nexperiments: [[configs/tiny.yaml]]",
     "['configs/tiny.yaml'] is not of type 'string'"),
]


@pytest.mark.parametrize("lines, refusal", [case[1:] for case in SCHEMA_CASES],
                         ids=[case[0] for case in SCHEMA_CASES])
def test_a_pipeline_config_the_schema_refuses_plans_nothing(tmp_path, lines, refusal):
    workflow = copy_workflow(tmp_path / "workflow")
    pipeline = yaml.safe_load(f"experiments: [configs/tiny.yaml]\nresults: results\n{lines}\n")
    result = _plan(workflow, yaml.safe_dump(pipeline))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"ValidationError: {refusal}" in output, output[-3000:]
