"""`reproduce attention`: heads of chosen layers for chosen sentences, the three kinds of
attention, plotted from a real checkpoint and sentencepiece model; bad choices are one-line
errors."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import sentencepiece
import torch

from reproduce.cli import main
from reproduce.config import BpeConfig, ModelConfig
from reproduce.data.bpe import train_sentencepiece
from reproduce.decoding.translate import load_model
from reproduce.figures import attention
from reproduce.model.architectures import build_model
from reproduce.model.inspection import attention_maps
from reproduce.model.transformer import Transformer
from reproduce.special_tokens import BOS, EOS
from reproduce.training.checkpoints import save_checkpoint

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORDS = "the cat dog sat on a mat house tree red blue big small runs jumps".split()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 5))
             for i in range(200)]
    for side in ("src", "tgt"):
        (folder / f"train.{side}").write_text("\n".join(lines) + "\n")
    spm = train_sentencepiece(folder / "train.src", folder / "train.tgt",
                              BpeConfig(vocab_size=60), folder / "spm")
    torch.manual_seed(0)
    config = ModelConfig(layers=2, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8)
    model = Transformer(config, 60)
    save_checkpoint({"model": model.state_dict(), "model_config": config.model_dump(),
                     "vocab_size": 60, "step": 0}, folder / "averaged.pt")
    (folder / "test.src").write_text("the cat sat on a mat\nbig red house\n")
    (folder / "test.txt").write_text("a dog runs\nthe small tree jumps\n")
    return folder, spm


def _arguments(folder, spm, out, sentences="1", layers=None):
    arguments = ["attention", "--checkpoint", str(folder / "averaged.pt"), "--spm-model", str(spm),
                 "--source", str(folder / "test.src"), "--target", str(folder / "test.txt"),
                 "--sentences", sentences, "--out-dir", str(out)]
    return arguments + (["--layers", layers] if layers else [])


def test_plots_every_kind_for_each_sentence_and_layer(model_files, tmp_path):
    folder, spm = model_files
    main(_arguments(folder, spm, tmp_path / "figures", sentences="0,1", layers="1,2"))
    written = sorted(path.name for path in (tmp_path / "figures").iterdir())
    assert written == sorted(f"{kind}_sentence{s}_layer{layer}.png"
                             for kind in ("encoder_self", "decoder_self", "cross")
                             for s in (0, 1) for layer in (1, 2))
    assert all(path.read_bytes().startswith(PNG_MAGIC) for path in (tmp_path / "figures").iterdir())


def test_the_default_layer_is_the_last(model_files, tmp_path):
    folder, spm = model_files
    main(_arguments(folder, spm, tmp_path / "figures"))
    assert sorted(path.name for path in (tmp_path / "figures").iterdir()) == [
        "cross_sentence1_layer2.png", "decoder_self_sentence1_layer2.png",
        "encoder_self_sentence1_layer2.png"]


@pytest.mark.parametrize(("sentences", "layers", "message"), [
    ("5", None, r"test\.src: has 2 lines; sentence indices \[5\] are out of range"),
    ("2", None, r"test\.src: has 2 lines; sentence indices \[2\] are out of range"),
    ("0", "3", r"averaged\.pt: the model has layers 1\.\.2; got \[3\]"),
])
def test_bad_choices_are_one_line_errors(model_files, tmp_path, sentences, layers, message):
    folder, spm = model_files
    with pytest.raises(SystemExit, match=message):
        main(_arguments(folder, spm, tmp_path / "figures", sentences, layers))


def test_sentences_that_are_not_numbers_are_a_usage_error_of_the_option(model_files, tmp_path,
                                                                        capsys):
    folder, spm = model_files
    with pytest.raises(SystemExit) as exit:
        main(_arguments(folder, spm, tmp_path / "figures", "zero"))
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "reproduce attention: error: argument --sentences: 'zero': expected comma-separated "
        "integers (see reproduce attention --help)"]


def test_an_rnn_checkpoint_is_refused_in_one_line(model_files, tmp_path):
    folder, spm = model_files
    config = ModelConfig(architecture="rnn", layers=1, d_model=16)
    save_checkpoint({"model": build_model(config, 60).state_dict(),
                     "model_config": config.model_dump(), "vocab_size": 60, "step": 0},
                    tmp_path / "averaged.pt")
    (tmp_path / "test.src").write_text((folder / "test.src").read_text())
    (tmp_path / "test.txt").write_text((folder / "test.txt").read_text())
    with pytest.raises(SystemExit, match=r"averaged\.pt: a model\.architecture rnn model has no "
                                         r"attention heads to plot; Figures 3-5 need a "
                                         r"Transformer"):
        main(_arguments(tmp_path, spm, tmp_path / "figures"))


def test_each_figure_is_its_own_layers_weights_with_queries_down_and_keys_across(model_files,
                                                                                 tmp_path,
                                                                                 monkeypatch):
    """A figure titled layer L must show layer L's weights, and encoder-decoder attention must
    put the target's pieces (queries) down the side and the source's (keys) across. A PNG cannot
    be read back into weights, so the figures are kept as they are handed to be saved."""
    folder, spm = model_files
    shown = {}

    def keep(figure, path):
        shown[path.name] = figure

    monkeypatch.setattr(attention, "save_figure", keep)
    attention.plot_attention(folder / "averaged.pt", spm, folder / "test.src",
                             folder / "test.txt", [0], [1, 2], tmp_path / "figures")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    source = processor.encode("the cat sat on a mat") + [EOS]
    target = [BOS] + processor.encode("a dog runs")
    maps = attention_maps(load_model(folder / "averaged.pt"), torch.tensor([source]),
                          torch.tensor([target]))
    assert not torch.allclose(maps["cross"][0], maps["cross"][1])  # the layers can be told apart
    for layer in (1, 2):
        axes = shown[f"cross_sentence0_layer{layer}.png"].axes[0]  # head 1
        np.testing.assert_allclose(axes.images[0].get_array(), maps["cross"][layer - 1][0][0])
        assert [label.get_text() for label in axes.get_xticklabels()] == \
            processor.id_to_piece(source[:-1]) + ["</s>"]
        assert [label.get_text() for label in axes.get_yticklabels()] == \
            ["<s>"] + processor.id_to_piece(target[1:])
    plt.close("all")
