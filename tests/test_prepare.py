"""Preparation of splits: SGM parsing, normalisation, cleaning counts, errors naming sources."""

import json

import pytest

from reproduce.config import Cleaning, ConfigError, Source, load_experiment
from reproduce.data.prepare import CorpusMismatchError, prepare_split
from reproduce.data.sgm import parse_sgm_text
from tests.corpus_archives import wmt_like_members, write_tgz


def test_sgm_segments_entities_and_odd_markup():
    text = """<refset setid="x" srclang='en'>
<doc docid="a" genre=news>
<p>
<seg id="1">Tom &amp; Jerry</seg>
<seg id=2 >  spaced   out  </seg>
<SEG id="3">&quot;quoted&quot; &lt;b&gt; &#39;apostrophe&#39;</SEG>
<seg id="4">across
lines</seg >
</p>
</doc>
</refset>"""
    assert parse_sgm_text(text) == [
        "Tom & Jerry", "spaced out", "\"quoted\" <b> 'apostrophe'", "across lines",
    ]


@pytest.fixture
def downloads(tmp_path):
    write_tgz(tmp_path / "downloads" / "europarl.tgz", wmt_like_members())
    return tmp_path / "downloads"


def _source(fmt="text", **members):
    defaults = {"source_member": "training/europarl-v7.de-en.en",
                "target_member": "training/europarl-v7.de-en.de"}
    return Source(name="europarl", url="file:x/europarl.tgz", format=fmt, **(defaults | members))


def test_training_pairs_are_cleaned_with_exact_counts(downloads, tmp_path):
    report = prepare_split([_source()], "train", downloads, tmp_path / "data",
                           Cleaning(max_tokens=250, max_length_ratio=1.5))
    # 5 pairs: kept "A small house", "The cat sleeps"; dropped: empty side, 300 tokens, ratio 3/12.
    assert report["sources"]["europarl"] == {
        "read": 5, "kept": 2, "dropped_empty": 1, "dropped_too_long": 1, "dropped_length_ratio": 1,
    }
    assert (tmp_path / "data/train.src").read_text() == "A small house .\nThe cat sleeps .\n"
    assert (tmp_path / "data/train.tgt").read_text() == "Ein kleines Haus .\nDie Katze schläft .\n"
    assert json.loads((tmp_path / "data/train.report.json").read_text())["kept"] == 2


def test_dev_sets_are_read_from_sgm_and_never_filtered(downloads, tmp_path):
    source = _source("sgm", source_member="dev/newstest2013-src.en.sgm",
                     target_member="dev/newstest2013-ref.de.sgm")
    prepare_split([source], "dev", downloads, tmp_path / "data", Cleaning(max_length_ratio=1.0))
    assert (tmp_path / "data/dev.src").read_text() == "Good morning .\nR&D <rocks>\n"
    assert (tmp_path / "data/dev.tgt").read_text() == 'Guten Morgen .\nF&E "rockt"\n'


def test_unicode_is_normalised(tmp_path):
    write_tgz(tmp_path / "dl" / "europarl.tgz", {
        "training/europarl-v7.de-en.en": "ﬁne caf\u0065\u0301\n",
        "training/europarl-v7.de-en.de": "gut\u00a0so Café\n",
    })
    prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "data", Cleaning())
    assert (tmp_path / "data/train.src").read_text() == "fine café\n"
    assert (tmp_path / "data/train.tgt").read_text() == "gut so Café\n"


def test_sides_of_different_length_are_an_error_naming_the_source(tmp_path):
    write_tgz(tmp_path / "dl" / "europarl.tgz", {
        "training/europarl-v7.de-en.en": "a\nb\nc\n", "training/europarl-v7.de-en.de": "x\ny\n",
    })
    with pytest.raises(CorpusMismatchError, match=r"'europarl'.*has 3 sentences.*has 2"):
        prepare_split([_source()], "train", tmp_path / "dl", tmp_path / "out", Cleaning())
    assert not (tmp_path / "out/train.src").exists()  # nothing half-written left as finished


def test_tsv_sources(tmp_path):
    write_tgz(tmp_path / "dl" / "europarl.tgz", {"corpus.tsv": "one two\teins zwei\nthree\tdrei\n"})
    source = Source(name="europarl", url="file:x/europarl.tgz", format="tsv", source_member="corpus.tsv")
    prepare_split([source], "test", tmp_path / "dl", tmp_path / "data", Cleaning())
    assert (tmp_path / "data/test.tgt").read_text() == "eins zwei\ndrei\n"


def test_an_unknown_format_is_rejected_before_any_download(tmp_path):
    config = tmp_path / "experiment.yaml"
    config.write_text("""
name: broken
source_lang: en
target_lang: de
data:
  train: [{name: a, url: "http://127.0.0.1:9/a.tgz", format: xml}]
  dev: [{name: b, url: "http://127.0.0.1:9/b.tgz"}]
  test: [{name: c, url: "http://127.0.0.1:9/c.tgz"}]
bpe: {vocab_size: 100}
training: {steps: 1}
variants: {base: {}}
""")
    with pytest.raises(ConfigError, match=r"experiment\.yaml: data\.train\.0\.format: Input should be 'text', 'sgm' or 'tsv'"):
        load_experiment(config)
