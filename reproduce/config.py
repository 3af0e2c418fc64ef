"""Experiments as data: the schema of an experiment file and the resolution of its variants.

An *experiment file* (``configs/<dataset>.yaml``) describes one dataset end to end: where its
corpora come from, how they are cleaned, the shared sentencepiece vocabulary, the base model and
training hyper-parameters (paper section 5), decoding (section 6.1), and the named *variants*
(Table 3's rows), each a set of overrides of the base.

Every model here forbids unknown keys, so that a typo stops the run at start-up with a message
naming the file and the key (:class:`ConfigError`). Every field says what it means in its
``description``, from which ``reproduce settings`` and docs/configuration.md's reference are
generated (:mod:`reproduce.settings_reference`).
"""

from __future__ import annotations

import copy
import urllib.parse
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, TypeAdapter, ValidationError,
                      field_validator, model_validator)

from reproduce.errors import ConfigError  # callers import it from here too


class Strict(BaseModel):
    """Unknown keys are refused, and so are NaN and infinite numbers: no bound compares them
    usefully (an infinite learning rate or length penalty passes ``gt=0``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
class Source(Strict):
    """One corpus inside one downloadable file (an archive or a plain file); its members name
    the files inside the archive that hold the corpus's sides."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="The corpus's name in prepare's log and counts (`<split>.report.json`) and in "
                    "the names of its extracted files.")
    url: str = Field(
        description="Where the file comes from: an http://, https:// or file: URL (file:relative/"
                    "path is relative to the working directory). Query strings and credentials "
                    "never reach file names or logs; credentials (user:password@) are sent as "
                    "Basic authentication.")
    sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$",
        description="The file's SHA-256 (64 lowercase hex digits), checked before it is used; a "
                    "mismatching download is moved aside to `<name>.corrupt`. It names the data: "
                    "the url may then change (a mirror, https, a new signature) without a new "
                    "download, preparation or training. null: the url names the data, and only "
                    "the file's length is checked (with a warning); a server that sends no length "
                    "is refused.")
    format: Literal["text", "sgm", "tsv", "ptb"] = Field(
        default="text",
        description="How the members hold the pairs: text = one sentence a line, a file per "
                    "side; sgm = WMT's SGML `<seg>` lines, a file per side; tsv = one file, source "
                    "in column 0 and target in column 1 (a blank line, as between documents, is "
                    "an empty pair, which cleaning drops from training data); ptb = Penn "
                    "Treebank trees (section 6.3), each cleaned tree giving a pair of its words "
                    "and its linearisation (parsing experiments only).")
    source_member: str | None = Field(
        default=None,
        description="The source side's file inside the archive (for tsv: the file of both "
                    "sides); for ptb one tree file or a glob over the archive's members, read in "
                    "sorted order, each `*`, `?` or `[...]` within one folder "
                    "(`treebank_3/parsed/mrg/wsj/2[2]/*.mrg`). null (tsv and ptb): the download "
                    "itself, a plain file rather than an archive.")
    target_member: str | None = Field(
        default=None,
        description="The target side's file inside the archive, for text and sgm, whose sides are "
                    "two files (both members named, and different); left out for tsv and ptb, "
                    "whose source_member holds both sides.")

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        if not url.startswith(("http://", "https://", "file:")):
            raise ConfigError(
                f"expected an http://, https:// or file: URL (file:relative/path is relative to "
                f"the working directory), got {url!r}"
            )
        return url

    @model_validator(mode="after")
    def _members_fit_format(self) -> "Source":
        if self.format in ("tsv", "ptb") and self.target_member is not None:
            raise ConfigError(f"a {self.format} source holds both sides in source_member; drop "
                              "target_member")
        members = (self.source_member, self.target_member)
        if self.format in ("text", "sgm") and (None in members or members[0] == members[1]):
            raise ConfigError(
                f"{self.format} sources read each side from its own file: name the archive's two "
                "members in source_member and target_member (one file as both sides would pair "
                "every sentence with itself; a file of both sides is format: tsv)")
        return self

    def identity(self) -> dict[str, Any]:
        """The source as the data it gives, for the settings that say what a split was prepared
        from and a model trained on: a declared sha256 fixes the file's bytes, so its url (moved
        to a mirror, served over https, signed anew) is left out; without one, the url is all
        that names the file."""
        return self.model_dump(mode="json", exclude={"url"} if self.sha256 else None)


def url_file_name(url: str) -> str:
    """The URL's last path component without query string: the name of a file in ``mirror_dir``."""
    path = (urllib.parse.urlsplit(url).path if not url.startswith("file:")
            else url.removeprefix("file:"))
    return path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


class Cleaning(Strict):
    """Filters applied to training pairs only (dev/test are never filtered), and the Unicode
    normalisation of every split."""

    max_tokens: int = Field(
        default=250, gt=0,
        description="A training pair with more whitespace tokens than this on either side is "
                    "dropped (after normalisation).")
    max_length_ratio: float = Field(
        default=1.5, ge=1.0,
        description="A training pair whose longer side has more than this many times the "
                    "whitespace tokens of its shorter side is dropped.")
    unicode_normalization: Literal["NFC", "NFKC", "none"] = Field(
        default="NFKC",
        description="The Unicode normal form every pair is brought to, dev and test included "
                    "(whitespace is collapsed either way); none keeps the text's own.")


class DownloadLimits(Strict):
    """When a download is given up, so that a server trickling bytes cannot hold it forever (the
    socket timeout bounds one read only): ``deadline_minutes`` for the whole download, retries
    included, and a minimum rate, as curl's ``--speed-limit``/``--speed-time``: an attempt that
    averages fewer than ``min_rate_bytes_per_second`` over ``min_rate_window_seconds`` is retried
    (resuming; 0 bytes/s: no minimum). The defaults let the largest WMT14 archive (2.6 GB) through
    at 150 kB/s, and a dead connection go in two minutes. Settings of the machine's network, not
    of the data: outside every fingerprint (:func:`reproduce.provenance.trained_settings`)."""

    deadline_minutes: float = Field(
        default=360, gt=0,
        description="Longest a download may take, retries included; past it the download stops "
                    "with its partial file kept, for the next run to resume.")
    min_rate_bytes_per_second: int = Field(
        default=1024, ge=0,
        description="An attempt that averages fewer bytes a second than this over "
                    "min_rate_window_seconds is retried, resuming where it stopped; 0: no "
                    "minimum.")
    min_rate_window_seconds: float = Field(
        default=120, gt=0,
        description="The span over which an attempt's rate is held to min_rate_bytes_per_second "
                    "(curl's --speed-time).")


class DataConfig(Strict):
    """Where the corpora come from and how training pairs are filtered."""

    train: list[Source] = Field(
        min_length=1,
        description="The training corpora, concatenated in this order, then cleaned; the "
                    "vocabulary is trained on them.")
    dev: list[Source] = Field(
        min_length=1,
        description="The development corpora (newstest2013 for WMT14), never filtered: the dev "
                    "loss during training, and Table 3's scores (of each variant's last "
                    "checkpoint).")
    test: list[Source] = Field(
        min_length=1,
        description="The test corpora (newstest2014 for WMT14), never filtered: Table 2's and "
                    "Table 4's scores (of each variant's averaged checkpoints).")
    cleaning: Cleaning = Field(
        default=Cleaning(),
        description="Filters of the training pairs, and the Unicode normalisation of every split.")
    mirror_dir: str | None = Field(
        default=None,
        description="A folder of pre-downloaded archives, named as the URLs' last path "
                    "components, copied instead of downloading, for clusters without internet "
                    "access; relative to the working directory. Two URLs ending in the same name "
                    "are refused with it.")
    min_pairs: int = Field(
        default=1, gt=0,
        description="Fewest sentence pairs a prepared split may hold after cleaning; fewer stops "
                    "prepare naming the split and its sources, instead of failing later in BPE or "
                    "training.")
    download: DownloadLimits = Field(
        default=DownloadLimits(),
        description="When a download is given up: settings of this machine's network, not of "
                    "the data, so they are left out of the trained settings' fingerprint.")

    @model_validator(mode="after")
    def _mirror_names_one_file_a_url(self) -> "DataConfig":
        """A mirror holds each archive under its URL's last path component: two URLs that end
        in the same name (wmt13/dev.tgz and wmt14/dev.tgz) would both be given one file."""
        if self.mirror_dir is None:
            return self
        urls: dict[str, str] = {}
        for source in (*self.train, *self.dev, *self.test):
            name = url_file_name(source.url)
            if urls.setdefault(name, source.url) != source.url:
                raise ConfigError(
                    f"mirror_dir: {urls[name]} and {source.url} end in the same file name "
                    f"{name!r}, but a mirror holds one file of each name; download one of them "
                    f"without the mirror (mirror_dir: null) or serve it from another URL")
        return self


class BpeConfig(Strict):
    """Shared source/target sentencepiece vocabulary (paper section 5.1)."""

    vocab_size: int = Field(
        gt=0,
        description="Pieces of the shared vocabulary (paper: about 37,000 for EN-DE, 32,000 for "
                    "EN-FR); a small corpus may end with fewer, and the size reached is logged.")
    model_type: Literal["bpe", "unigram"] = Field(
        default="bpe",
        description="sentencepiece's segmentation algorithm: byte-pair encoding, as the paper, "
                    "or the unigram language model.")
    input_sentence_size: int = Field(
        default=10_000_000, gt=0,
        description="Sentences, of both sides of the prepared train split, in the shuffled "
                    "sample the vocabulary is trained on.")
    character_coverage: float = Field(
        default=1.0, gt=0, le=1,
        description="The share of the training text's characters the vocabulary must cover; the "
                    "rarest of the rest become unknown.")
    seed: int = Field(
        default=1, ge=0, lt=2**32,
        description="sentencepiece's random seed (its set_random_generator_seed takes an "
                    "unsigned 32-bit integer), which fixes the sample and so the vocabulary.")


# --------------------------------------------------------------------------------------------
# Model, training, decoding
# --------------------------------------------------------------------------------------------
class ModelConfig(Strict):
    """Hyper-parameters of Table 3's columns (N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls).

    ``architecture: rnn`` is Table 2's recurrent baseline (:mod:`reproduce.model.recurrent`):
    ``layers`` LSTM layers per stack, ``d_model`` the embedding and hidden width (d_model/2 per
    direction in the bidirectional encoder), ``dropout`` and ``label_smoothing`` as for the
    Transformer; ``heads``, ``d_k``, ``d_v``, ``d_ff``, ``attention_dropout``, ``max_positions``
    are ignored, and ``attention_radius`` or ``positional: learned`` are refused.
    """

    architecture: Literal["transformer", "rnn"] = Field(
        default="transformer",
        description="The Transformer of section 3, or an LSTM encoder-decoder with attention "
                    "(Luong et al. 2015), Table 2's recurrent baseline.")
    rnn_attention: Literal["additive", "multiplicative"] = Field(
        default="multiplicative",
        description="rnn only: the score of a decoder state h_t against an encoder state h_s: "
                    "multiplicative = Luong's \"general\" h_t^T W h_s, additive = Bahdanau et "
                    "al.'s v^T tanh(W1 h_t + W2 h_s).")
    layers: int = Field(
        default=6, gt=0,
        description="N: layers of the encoder and of the decoder each (rnn: LSTM layers per "
                    "stack).")
    d_model: int = Field(
        default=512, gt=0,
        description="d_model: the width of embeddings and of every layer's output (rnn: the "
                    "embedding and hidden width, d_model/2 per direction in the bidirectional "
                    "encoder, so even).")
    d_ff: int = Field(
        default=2048, gt=0,
        description="d_ff: the inner width of the position-wise feed-forward networks.")
    heads: int = Field(default=8, gt=0, description="h: attention heads per attention layer.")
    d_k: int = Field(default=64, gt=0,
                     description="d_k: the width of each head's queries and keys.")
    d_v: int = Field(default=64, gt=0, description="d_v: the width of each head's values.")
    dropout: float = Field(
        default=0.1, ge=0, lt=1,
        description="P_drop: dropout on each sub-layer's output and on the sums of embeddings "
                    "and positional encodings (section 5.4).")
    attention_dropout: float = Field(
        default=0.0, ge=0, lt=1,
        description="Dropout on attention weights: not in the paper's text (tensor2tensor's "
                    "base used 0.0).")
    dropout_noise: Literal["fmix32-16"] = Field(
        default="fmix32-16",
        description="How dropout draws its noise, the one scheme of this code "
                    "(reproduce/model/dropout.py): each mask bit a hash of (seed, step, pair, "
                    "side, position, site, feature), splitmix64 per token on the host, then "
                    "MurmurHash3's fmix32 per unit, kept where its top 16 bits reach P_drop x "
                    "2^16. A trained setting, so that a checkpoint whose noise was drawn "
                    "otherwise (another version of the code) is not resumed as this run's.")
    label_smoothing: float = Field(
        default=0.1, ge=0, lt=1,
        description="eps_ls: the probability mass label smoothing spreads over the non-padding "
                    "tokens other than the reference (section 5.4).")
    positional: Literal["sinusoidal", "learned"] = Field(
        default="sinusoidal",
        description="Sinusoidal positional encodings (section 3.5), or one learned position "
                    "embedding table shared by encoder and decoder (Table 3, row E).")
    max_positions: int = Field(
        default=1024, gt=0,
        description="learned positions only: the longest sequence, in tokens, the learned table "
                    "has rows for; decoding never goes beyond it.")
    attention_radius: int | None = Field(
        default=None, ge=0,
        description="Restricted self-attention (section 4, Table 1): each position attends only "
                    "to positions at most this far away (and, in the decoder, not ahead). null: "
                    "unrestricted, as the paper's models; cross-attention is never restricted.")

    @property
    def position_limit(self) -> int | None:
        """Most positions a sequence may have: ``max_positions`` for learned positions, which
        have no embedding beyond it; None for sinusoids and LSTMs, which have no limit."""
        return self.max_positions if self.positional == "learned" else None

    @model_validator(mode="after")
    def _recurrent_settings_an_rnn_can_honour(self) -> "ModelConfig":
        if self.architecture != "rnn":
            return self
        if self.attention_radius is not None:
            raise ConfigError("attention_radius restricts self-attention, which architecture rnn "
                              "does not have; remove it (or use architecture transformer)")
        if self.positional == "learned":
            raise ConfigError("positional: learned adds position embeddings, which architecture "
                              "rnn does not use (its LSTMs see the order); use sinusoidal "
                              "(ignored)")
        if self.d_model % 2:
            raise ConfigError(f"architecture rnn needs an even d_model (the bidirectional encoder "
                              f"has d_model/2 units per direction), got {self.d_model}")
        return self

class CheckpointConfig(Strict):
    """When training saves checkpoints, and how many it keeps."""

    every_steps: int = Field(
        default=1000, gt=0,
        description="Save every this many steps: the grid whose last average_last checkpoints "
                    "are averaged (the final step is always saved too).")
    every_minutes: float = Field(
        default=10.0, ge=0,
        description="Also save when this many minutes of wall-clock time passed since the last "
                    "save (paper: 10-minute intervals), for resuming only: such checkpoints off "
                    "the step grid are never averaged. 0 disables the wall-clock trigger.")
    keep_last: int = Field(
        default=20, gt=0,
        description="Grid checkpoints kept on disk; older ones are deleted. At least "
                    "average_last.")


# torch.manual_seed takes at most an unsigned 64-bit integer; the batch order's numpy generator
# (reproduce/training/batching.py) refuses negative seeds.
Seed = Annotated[int, Field(ge=0, lt=2**64)]
_ONE_SEED = TypeAdapter(Seed)
_SEEDS = TypeAdapter(Annotated[list[Seed], Field(min_length=1)])


class TrainingConfig(Strict):
    """Section 5.2-5.4: batching by token count, Adam, eq. 3's learning rate.

    Adam's decay rates are bounded to [0, 1) and its epsilon to positive numbers here, so that a
    bad one stops the run at start-up: torch.optim.Adam would refuse it only once the model is
    built, in a traceback."""

    steps: int = Field(
        gt=0,
        description="Optimizer steps to train (paper: 100,000 base, 300,000 big); raising it "
                    "continues a finished run from its last checkpoint.")
    tokens_per_step: int = Field(
        default=25_000, gt=0,
        description="Source and target tokens per optimizer step, summed over all GPUs (paper: "
                    "~25,000 each); constant whatever the number of GPUs: gradient accumulation "
                    "makes up the difference.")
    micro_batches_per_step: int = Field(
        default=8, gt=0,
        description="A step is this many micro-batches of ~tokens_per_step / "
                    "micro_batches_per_step tokens (paper: 8 GPUs of ~3.1k tokens), the unit "
                    "ranks share: the number of ranks must divide it (8 allows 1, 2, 4, 8). A "
                    "rank computes its share in as few passes as max_tokens_per_device allows.")
    max_tokens_per_device: int = Field(
        default=4096, gt=0,
        description="Most real tokens (per side) of one forward/backward on one device: a rank "
                    "fuses its micro-batches of a step into as few passes of up to this many "
                    "tokens as hold them; memory grows with it and with the padding of its "
                    "widest sentence (docs/configuration.md, \"Sizing a pass\"). Not a trained "
                    "setting: a resumed run may change it. At least max_source_tokens.")
    pad_to_multiple: int = Field(
        default=8, gt=0,
        description="Tensor widths are padded to a multiple of this, bounding the shapes GPU "
                    "kernels meet.")
    pass_buckets: bool = Field(default=False, description=(
        "Give every forward/backward pass one of a few shapes: its sentence count and width "
        "rounded up to a power of two, its token count to a multiple of max_tokens_per_device / "
        "32, filled with dummy sentences and tokens that change neither the loss nor the "
        "gradient (reproduce/training/batching.py, pass_shape). It is for GPUs that capture "
        "each shape's pass once as a CUDA graph; without one it only adds computation, so it "
        "is off until a GPU has measured it."))
    warmup_steps: int = Field(
        default=4000, gt=0,
        description="warmup_steps of eq. 3: the learning rate rises linearly for this many "
                    "steps, then decays with the inverse square root of the step.")
    lr_scale: float = Field(
        default=1.0, gt=0,
        description="A factor on eq. 3's learning rate, d_model^-0.5 * min(step^-0.5, "
                    "step * warmup_steps^-1.5); 1 is the paper's.")
    adam_beta1: float = Field(
        default=0.9, ge=0, lt=1,
        description="Adam's beta1, the decay rate of its gradient mean (section 5.3).")
    adam_beta2: float = Field(
        default=0.98, ge=0, lt=1,
        description="Adam's beta2, the decay rate of its squared-gradient mean (section 5.3).")
    adam_eps: float = Field(default=1e-9, gt=0,
                            description="Adam's epsilon (section 5.3: 1e-9).")
    max_source_tokens: int = Field(
        default=256, gt=0,
        description="Longest pair training takes, in positions per side with EOS (the name "
                    "notwithstanding, both sides are held to it); longer training pairs are "
                    "skipped, and the count is logged.")
    seed: Seed = Field(
        default=1,
        description="The one seed this training runs with: initialisation, batch order and "
                    "dropout noise follow from it.")
    log_every_steps: int = Field(
        default=100, gt=0,
        description="Record the training loss, learning rate, gradient norm and throughput, "
                    "and log a progress line, every this many steps (and at the last).")
    eval_every_steps: int = Field(
        default=1000, gt=0,
        description="Compute the dev split's loss and perplexity every this many steps (and at "
                    "the last).")
    checkpoints: CheckpointConfig = Field(
        default=CheckpointConfig(),
        description="When checkpoints are saved and how many are kept.")
    average_last: int = Field(
        default=5, gt=0,
        description="Checkpoints of the step grid averaged for the final model (paper: 5 base, "
                    "20 big).")
    precision: Literal["fp32", "bf16", "fp16", "auto"] = Field(
        default="fp32",
        description="What a GPU computes the forward and backward passes in (a CPU always "
                    "computes in fp32): fp32; bf16 autocast; fp16 autocast with dynamic loss "
                    "scaling (fairseq's --fp16, for GPUs without bf16 units such as the paper's "
                    "P100s or V100s); auto = bf16 where the GPU has bf16 units, fp16 elsewhere "
                    "(reproduce/training/precision.py).")
    clip_norm: float | None = Field(
        default=None, gt=0,
        description="Rescale a step's gradient to this L2 norm where it is larger; null: never "
                    "(the paper's Transformers; Luong et al. 2015 clip their LSTMs at 5, for a "
                    "loss summed over each sentence's tokens: our per-token mean has smaller "
                    "gradients, which 5 clips more rarely).")
    compile: Literal[True, False, "auto"] = Field(
        default="auto",
        description="Compile the model's forward and backward, and the loss's element-wise "
                    "work, with torch.compile: auto = on GPUs (where it pays: fewer kernel "
                    "launches, the dropout hash fused), eager on CPUs (compiling costs more than "
                    "it saves there). The weights do not depend on it beyond float summation "
                    "order.")
    cuda_graphs: bool = Field(
        default=False,
        description="On GPUs, replay each pass shape's compiled forward, loss and backward as "
                    "CUDA graphs (torch.compile's reduce-overhead mode: a graph recorded once per "
                    "shape, then one launch where there were hundreds), for a host that cannot "
                    "launch kernels as fast as the GPU runs them. Needs compile and "
                    "pass_buckets (a few shapes, each recorded once); changes nothing on CPUs. "
                    "Off until a GPU has run its tests and measured it (BENCHMARKS.md).")

    attention: Literal["auto", "padded", "varlen", "flex"] = Field(
        default="auto",
        description="How attention runs over a pass's sentences: padded (SDPA on a right-padded "
                    "batch under a key mask, on every device and precision), varlen (flash "
                    "attention over the packed tokens with their sentence offsets: no padding "
                    "cells, no mask, a tile of its own for each sentence; CUDA in bf16 or fp16, "
                    "padded elsewhere) or flex (FlexAttention over the packed tokens in tiles of "
                    "128 tokens that short sentences share, each query masked to its sentence; "
                    "CUDA, compiled and with pass_buckets, padded elsewhere; not yet run on a "
                    "GPU). All compute eq. 1 "
                    "within each sentence. auto = varlen on GPUs (measured on an H200: the same "
                    "losses as padded, a third of the peak memory for a 32k-token pass of big, "
                    "and faster; BENCHMARKS.md), padded on CPUs, and with pass_buckets until a GPU "
                    "has run packed buckets (varlen with pass_buckets: dummy tokens in rows of "
                    "their own, reproduce/training/batching.py).")

    @model_validator(mode="after")
    def _flex_compiled_in_buckets(self) -> "TrainingConfig":
        if self.attention == "flex" and (self.compile is False or not self.pass_buckets):
            raise ConfigError(
                "attention flex needs compile: auto or true (uncompiled, FlexAttention computes "
                "every query of a pass against every key) and pass_buckets: true (a few pass "
                "shapes, each compiled on its own: under symbolic sizes FlexAttention computed "
                "wrong attention on torch 2.6)")
        return self

    @model_validator(mode="after")
    def _graphs_of_few_compiled_shapes(self) -> "TrainingConfig":
        if self.cuda_graphs and not (self.pass_buckets and self.compile is not False):
            raise ConfigError(
                "cuda_graphs records a graph per pass shape of the compiled pass: it needs "
                "pass_buckets: true (a few shapes) and compile: auto or true")
        return self

    @model_validator(mode="after")
    def _a_pass_holds_the_longest_pair(self) -> "TrainingConfig":
        if self.max_tokens_per_device < self.max_source_tokens:
            raise ConfigError(
                f"max_tokens_per_device ({self.max_tokens_per_device}) is below "
                f"max_source_tokens ({self.max_source_tokens}): a forward pass must hold the "
                "longest pair training takes; raise max_tokens_per_device or lower "
                "max_source_tokens")
        return self

    @model_validator(mode="after")
    def _averaged_checkpoints_evenly_spaced(self) -> "TrainingConfig":
        """Section 6.1 averages checkpoints written at fixed intervals. Training always saves
        its final step, so with step-triggered saving the final step must lie on the
        ``every_steps`` grid, or the last interval averaged would be shorter than the others."""
        every = self.checkpoints.every_steps
        if self.checkpoints.every_minutes == 0 and self.average_last > 1 and self.steps % every:
            lower, upper = self.steps - self.steps % every, self.steps - self.steps % every + every
            raise ConfigError(
                f"steps ({self.steps}) must be a multiple of checkpoints.every_steps ({every}), "
                f"so that the {self.average_last} averaged checkpoints are evenly spaced (the "
                f"final step is always saved); e.g. steps {lower} or {upper}, or an every_steps "
                f"that divides {self.steps}"
            )
        return self

    @model_validator(mode="after")
    def _enough_checkpoints_kept(self) -> "TrainingConfig":
        if self.checkpoints.keep_last < self.average_last:
            raise ConfigError(
                f"checkpoints.keep_last ({self.checkpoints.keep_last}) must be >= average_last "
                f"({self.average_last}), or the checkpoints to average would be deleted"
            )
        return self

    @model_validator(mode="after")
    def _enough_checkpoints_to_average(self) -> "TrainingConfig":
        """``average`` takes the last ``average_last`` checkpoints. Known in advance are one
        every ``every_steps`` steps and the final step's (always saved); wall-clock saves
        (``every_minutes``) are not counted, since their number depends on the hardware's
        speed: a setting that saves enough only on a slow GPU would fail after training on a
        fast one."""
        every = self.checkpoints.every_steps
        saved = self.steps // every + (self.steps % every > 0)
        if saved < self.average_last:
            raise ConfigError(
                f"average_last ({self.average_last}) is more than the {saved} checkpoints that "
                f"steps ({self.steps}) and checkpoints.every_steps ({every}) are sure to save "
                f"(every {every} steps and the final step; every_minutes saves are not counted); "
                f"lower average_last or every_steps, or raise steps")
        return self


DecodingPrecision = Literal["fp32", "tf32", "bf16", "fp16"]
GPU_CHECK_EVERY = 8  # decoding.check_every's auto on GPUs


class DecodingConfig(Strict):
    """Section 6.1: beam 4, alpha 0.6, max output length = input length + 50."""

    beam_size: int = Field(default=4, gt=0,
                           description="Hypotheses kept at each step of beam search.")
    length_penalty: float = Field(
        default=0.6, ge=0,
        description="alpha of GNMT's length penalty ((5 + |Y|) / 6)^alpha, which divides a "
                    "finished hypothesis's log-probability; 0: none.")
    max_length_offset: int = Field(
        default=50, ge=0,
        description="A translation has at most its source's tokens (EOS included) plus this "
                    "many tokens (EOS included), and no more than learned positions have rows "
                    "for.")
    max_sentences_per_batch: int = Field(
        default=64, gt=0,
        description="Most sentences decoded together; sentences are sorted by length first, "
                    "so that batches waste little on padding.")
    max_tokens_per_batch: int = Field(
        default=65_536, gt=0,
        description="Most cached target positions a batch may hold: a sentence counts "
                    "beam_size x (its batch's longest source + max_length_offset), the keys and "
                    "values its hypotheses may reach; bounds a batch alongside "
                    "max_sentences_per_batch (a longer sentence is decoded alone). The default "
                    "binds only past sources of 206 pieces at 64 sentences (beam 4, offset 50), so "
                    "CPU batches are what max_sentences_per_batch makes them; a GPU, which "
                    "decodes more sentences at once for the same time a step, can raise "
                    "max_sentences_per_batch and let this bound size its batches by memory.")
    check_every: int | Literal["auto"] = Field(
        default="auto",
        description="Steps of beam search between reads of which sentences are done: such a "
                    "read waits for the device, so 1 idles a GPU at every step; with more, a "
                    "sentence done in between stays in the batch, frozen, and computes for "
                    "nothing until read. The translations are the same whatever the value. "
                    f"auto = {GPU_CHECK_EVERY} on GPUs (measured with cuda_graphs on an H200: "
                    "BENCHMARKS.md), 1 on CPUs (a CPU does not wait on a read, and only pays "
                    "for the frozen rows).")
    cuda_graphs: Literal[True, False, "auto"] = Field(
        default="auto",
        description="Transformer only: keep the decoder's keys and values in buffers of the "
                    "batch's most positions, so that a step of beam search has static shapes, "
                    "and on a GPU replay each step (decoder and search) as a CUDA graph "
                    "recorded once per step shape: one launch instead of hundreds. A step's "
                    "shape is its rows (a batch sheds its done sentences only once they are "
                    "half its rows: at most log2(sentences) + 1 row counts a batch) and the "
                    "window of buffered positions its attention reads, which grows by 32 "
                    "positions as the outputs do. The same translations. auto = on for a "
                    "Transformer on a GPU (its tests ran green on an H200, and it was measured "
                    "there: BENCHMARKS.md), off on CPUs, where it only costs (done rows "
                    "compute until they are half the batch), and for the recurrent baseline.")
    precision: DecodingPrecision = Field(
        default="fp32",
        description="The arithmetic of beam search: fp32; tf32, fp32 whose matrix products a "
                    "GPU's tensor cores compute from inputs rounded to TF32's 10-bit mantissa, "
                    "accumulating in fp32 (on a CPU the same as fp32); or the model's matrix "
                    "products under bf16 or fp16 autocast (log-softmax and the hypotheses' scores "
                    "stay fp32), which GPUs compute at their matrix units' rate. fp32 until the "
                    "others' effect on a WMT model's BLEU is measured (on tiny demo models bf16 "
                    "changed 2-6% of the translations and BLEU by up to 0.3: BENCHMARKS.md); a "
                    "change decodes again, since it may change translations.")
    max_source_pieces: int = Field(
        default=1024, gt=0,
        description="Longest source line decoded, in sentencepiece pieces with its end of "
                    "sentence: a longer line is refused before any decoding, naming the file and "
                    "line, since beam search runs its length + max_length_offset steps over it "
                    "(a corpus whose line breaks were lost is one line of thousands of words). "
                    "No line of newstest2014 (EN, DE, FR) or newstest2013 (EN) has more than 506 "
                    "characters, nor 211 pieces even under a BPE of 1,000 (RELIABILITY.md); a "
                    "piece holds a character at least, so even single characters would cut such "
                    "a line into about 510 pieces, and 1024 covers it twice over. It is "
                    "model.max_positions' default too.")

    @field_validator("check_every", mode="plain")
    @classmethod
    def _steps_or_auto(cls, value: Any) -> int | str:
        """One message for both readings of the union (a count of steps, or auto)."""
        if value == "auto" or (type(value) is int and value > 0):
            return value
        raise ValueError("a number of steps above 0, or auto")

    def on(self, device_type: str, architecture: str) -> "DecodingConfig":
        """These settings with ``auto`` made concrete for a model of ``architecture`` decoding
        on ``device_type`` (``"cuda"``, ``"cpu"``...)."""
        gpu = device_type == "cuda"
        concrete = {}
        if self.check_every == "auto":
            concrete["check_every"] = GPU_CHECK_EVERY if gpu else 1
        if self.cuda_graphs == "auto":
            concrete["cuda_graphs"] = gpu and architecture == "transformer"
        return self.model_copy(update=concrete)


class TrainingPlan(TrainingConfig):
    """An experiment file's training section, where ``seed`` may list seeds (``[1, 2, 3]``): the
    variant is then trained once per seed, each training with these settings and that one seed
    (:meth:`Experiment.variant`), so that the spread of its scores over seeds measures what
    training's own randomness (initialisation, batch order, dropout) does to them."""

    seed: Seed | list[Seed] = Field(
        default=1,
        description="The seed of training's randomness (initialisation, batch order, dropout "
                    "noise), or a list of distinct seeds: one training each, whose spread of "
                    "scores measures what that randomness does to them.")

    @field_validator("seed", mode="plain")
    @classmethod
    def _one_seed_or_distinct_seeds(cls, value: Any) -> int | list[int]:
        """One seed, or a non-empty list of distinct ones; checked as one or the other so that
        an error says what is wrong with the value given, not with both readings of it."""
        adapter = _SEEDS if isinstance(value, list) else _ONE_SEED
        try:
            seed = adapter.validate_python(value, strict=True)
        except ValidationError as error:
            raise ValueError("; ".join(_seed_problem(item) for item in error.errors())) from None
        if isinstance(seed, list):
            repeated = sorted({one for one in seed if seed.count(one) > 1})
            if repeated:
                raise ValueError(f"seed {', '.join(map(str, repeated))} listed twice: each seed "
                                 "is one training, list it once")
        return seed

    @property
    def seeds(self) -> list[int]:
        return self.seed if isinstance(self.seed, list) else [self.seed]


def _seed_problem(error: dict[str, Any]) -> str:
    """``item 2: Input should be ...`` for a listed seed, the message alone for one seed."""
    location = error["loc"]
    return f"item {location[0]}: {error['msg']}" if location else error["msg"]


class Variant(Strict):
    """One row of Table 3 (or the base/big models of Table 2) as overrides of the base."""

    description: str = Field(default="",
                             description="What the variant changes, shown beside its name.")
    table3_row: str | None = Field(
        default=None,
        description="Label of the variant's row group in Table 3 (\"base\", \"A\", ..., "
                    "\"E\", \"big\"); null keeps it out of Table 3.")
    model: dict[str, Any] = Field(
        default={},
        description="Overrides of the experiment's model section, key by key.")
    training: dict[str, Any] = Field(
        default={},
        description="Overrides of the experiment's training section, key by key (nested "
                    "sections such as checkpoints merge key by key too).")
    decoding: dict[str, Any] = Field(
        default={},
        description="Overrides of the experiment's decoding section, key by key.")


class ResolvedVariant(Strict):
    """A variant with its overrides applied: everything needed to train and decode it."""

    name: str = Field(description="The variant's name in the experiment file.")
    description: str = Field(description="The variant's description.")
    table3_row: str | None = Field(description="Its row group in Table 3, or None.")
    model: ModelConfig = Field(description="The base model with the variant's overrides.")
    training: TrainingConfig = Field(
        description="The base training plan with the variant's overrides, and one seed.")
    decoding: DecodingConfig = Field(description="The base decoding with the variant's overrides.")

    @model_validator(mode="after")
    def _decoding_the_model_can_run(self) -> "ResolvedVariant":
        if self.decoding.cuda_graphs is True and self.model.architecture != "transformer":
            raise ConfigError(f"variants.{self.name}.decoding.cuda_graphs: the recurrent "
                              "baseline's decoder has no static shapes to replay; set it to false")
        return self


class TablesConfig(Strict):
    """Which variants fill the paper's tables, and what they are shown beside."""

    table2: dict[Literal["base", "big", "rnn"], str] = Field(
        default={},
        description="Which variants are Table 2's \"Transformer (base model)\" and "
                    "\"Transformer (big)\", and our recurrent baseline (a variant with "
                    "model.architecture: rnn), shown beside them.")
    gpu_flops_per_second: float | None = Field(
        default=None, gt=0,
        description="Rate per GPU for the paper-style FLOPs estimate. null: the datasheet peak "
                    "of the GPU that ran, at its training precision (reproduce/gpu_peak_rates.py; "
                    "the paper's P100 = 9.5e12). Set it to force one rate for every run.")
    paper_language_pair: Literal["en_de", "en_fr"] = Field(
        default="en_de",
        description="Which of the paper's language pairs our numbers are shown beside.")
    table4: dict[Literal["wsj_only", "semi_supervised"], str] = Field(
        default={},
        description="Parsing experiments: which variant is our Table 4 row, under the paper's "
                    "training setting it reproduces (\"WSJ only, discriminative\" or "
                    "\"semi-supervised\").")


class ScoringConfig(Strict):
    """How the paper-style tokenized BLEU is computed (see :mod:`reproduce.scoring.bleu`)."""

    compound_split: bool = Field(
        default=True,
        description="get_ende_bleu.sh's `a ##AT##-##AT## b` split of hyphenated compounds after "
                    "Moses tokenization (EN-DE as the paper; our choice for EN-FR is false).")


class Experiment(Strict):
    """A whole experiment file: one dataset with its model variants."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_]+$",
        description="The dataset's name: its folder under the results root and its MLflow "
                    "experiment.")
    task: Literal["translation", "parsing"] = Field(
        default="translation",
        description="What the model learns: translation (Tables 2 and 3), or English "
                    "constituency parsing (section 6.3, Table 4) as the translation of a "
                    "sentence's words into its linearised tree, scored by labelled-bracket F1 "
                    "instead of BLEU. Parsing data are format: ptb treebanks.")
    source_lang: str = Field(
        description="The source language's code (en), shown in Tables 2 and 3.")
    target_lang: str = Field(
        description="The target language's code (de, fr): Moses tokenizes translations and "
                    "references as this language for the paper-style BLEU; shown in Tables 2 and "
                    "3.")
    data: DataConfig = Field(
        description="Where the corpora come from, how they are downloaded and how training "
                    "pairs are filtered.")
    bpe: BpeConfig = Field(
        description="The shared source/target sentencepiece vocabulary (section 5.1).")
    model: ModelConfig = Field(
        default=ModelConfig(),
        description="The base model's hyper-parameters (Table 3's columns), which variants "
                    "override.")
    training: TrainingPlan = Field(
        description="The base training's hyper-parameters (sections 5.2-5.4) and seeds, which "
                    "variants override.")
    decoding: DecodingConfig = Field(
        default=DecodingConfig(),
        description="Beam search (section 6.1), which variants override.")
    variants: dict[str, Variant] = Field(
        min_length=1,
        description="The models trained, by name (letters, digits, underscores): each a set of "
                    "overrides of the base model, training and decoding.")
    tables: TablesConfig = Field(
        default=TablesConfig(),
        description="Which variants fill the paper's tables, and what they are shown beside.")
    scoring: ScoringConfig = Field(
        default=ScoringConfig(), description="How the paper-style tokenized BLEU is computed.")

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, variants: dict[str, Variant]) -> dict[str, Variant]:
        for name in variants:
            if not name.replace("_", "").isalnum():
                raise ConfigError(f"variant name {name!r} must be letters, digits and underscores")
        return variants

    @model_validator(mode="after")
    def _variants_resolve(self) -> "Experiment":
        for name in self.variants:
            self.variant(name)  # raises a ValueError naming the bad override
        for table in ("table2", "table4"):
            for role, name in getattr(self.tables, table).items():
                if name not in self.variants:
                    raise ConfigError(f"tables.{table}.{role} names unknown variant {name!r}")
        for role, name in self.tables.table2.items():
            architecture = self.variant(name).model.architecture
            if (architecture == "rnn") != (role == "rnn"):
                expected = "an rnn" if role == "rnn" else "a transformer"
                raise ConfigError(f"tables.table2.{role}: Table 2's {role} row needs {expected} "
                                  f"variant; {name!r} is model.architecture {architecture!r}")
        return self

    @model_validator(mode="after")
    def _data_and_tables_fit_the_task(self) -> "Experiment":
        """Treebanks are parsing data and parsing has only Table 4; translation never reads
        trees. Caught here, before any download or training."""
        for split in ("train", "dev", "test"):
            for index, source in enumerate(getattr(self.data, split)):
                if (source.format == "ptb") != (self.task == "parsing"):
                    expected = "ptb" if self.task == "parsing" else "text, sgm or tsv"
                    raise ConfigError(
                        f"data.{split}.{index}.format: a {self.task} experiment reads "
                        f"{expected} sources, got {source.format!r}")
        if self.task == "parsing":
            if self.tables.table2:
                raise ConfigError("tables.table2: a parsing experiment has no Table 2; "
                                  "map its variants in tables.table4")
            rows = [name for name, spec in self.variants.items() if spec.table3_row is not None]
            if rows:
                raise ConfigError(f"variants.{rows[0]}.table3_row: a parsing experiment has no "
                                  "Table 3; drop table3_row")
        elif self.tables.table4:
            raise ConfigError("tables.table4: only a parsing experiment (task: parsing) has "
                              "Table 4")
        return self

    def variant(self, name: str, seed: int | None = None) -> ResolvedVariant:
        """The base hyper-parameters with variant ``name``'s overrides applied, trained with
        ``seed``, one of :meth:`seeds` (default: the first; the seed is the only setting in
        which a variant's trainings differ)."""
        sections = self._resolved_sections(name)
        plan = sections.pop("training")
        if seed is None:
            seed = plan.seeds[0]
        elif seed not in plan.seeds:
            raise ConfigError(f"variants.{name}.training.seed: {seed} is not one of the "
                              f"variant's seeds ({', '.join(map(str, plan.seeds))})")
        training = TrainingConfig.model_validate(plan.model_dump() | {"seed": seed})
        spec = self.variants[name]
        return ResolvedVariant(name=name, description=spec.description,
                               table3_row=spec.table3_row, training=training, **sections)

    def seeds(self, name: str) -> list[int]:
        """The seeds variant ``name`` is trained with, one training each, in the file's order."""
        return self._resolved_sections(name)["training"].seeds

    def _resolved_sections(self, name: str) -> dict[str, Strict]:
        """Variant ``name``'s model, training plan and decoding, overrides applied."""
        if name not in self.variants:
            raise ConfigError(f"unknown variant {name!r}; known: {', '.join(self.variants)}")
        spec = self.variants[name]
        sections = {}
        for section, schema in (
            ("model", ModelConfig),
            ("training", TrainingPlan),
            ("decoding", DecodingConfig),
        ):
            merged = deep_merge(getattr(self, section).model_dump(), getattr(spec, section))
            try:
                sections[section] = schema.model_validate(merged, strict=True)
            except ValidationError as error:
                raise ConfigError(
                    f"variants.{name}.{section}: {describe_validation_error(error)}"
                ) from None
        return sections


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied key by key at every depth (a variant's overrides)."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def describe_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif not isinstance(item.get("input"), (dict, list)):
            message += f" (got {item.get('input')!r})"
        lines.append(f"{location}: {message}" if location else message)
    return "; ".join(lines)
