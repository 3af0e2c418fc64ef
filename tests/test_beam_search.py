"""Beam search against exhaustive search and greedy decoding on a tiny random model."""

import itertools
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from reproduce.config import DecodingConfig, ModelConfig
from reproduce.decoding.beam_search import (_max_output_lengths, _next_token_log_probs, _Search,
                                            beam_search, length_penalty)
from reproduce.decoding.step_graphs import StepGraphs
from reproduce.errors import ConfigError
from reproduce.model.architectures import Seq2Seq, build_model
from reproduce.model import key_values
from reproduce.model.encoder_decoder import DecoderCache
from reproduce.special_tokens import BOS, EOS, PAD, UNK


@torch.inference_mode()
def greedy_search(model: Seq2Seq, source: Tensor, max_length_offset: int = 50) -> list[list[int]]:
    """Arg-max decoding with the same length limit (the reference for beam size 1)."""
    model.eval()
    batch, device = source.size(0), source.device
    encoded = model.encode(source)
    max_lengths = _max_output_lengths(source, max_length_offset, model.config.position_limit)
    tokens = torch.full((batch, 1), BOS, dtype=torch.long, device=device)
    ended = torch.zeros(batch, dtype=torch.bool, device=device)
    cache = DecoderCache()
    for step in range(1, int(max_lengths.max()) + 1):
        logits = model.decode(tokens[:, -1:], encoded, cache)[:, -1]
        log_probs = _next_token_log_probs(logits, step, max_lengths)
        chosen = log_probs.argmax(dim=-1).masked_fill(ended, PAD)
        tokens = torch.cat([tokens, chosen.unsqueeze(1)], dim=1)
        ended |= chosen.eq(EOS)
        if bool(ended.all()):
            break
    return [[token for token in row[1:] if token not in (EOS, PAD)] for row in tokens.tolist()]

VOCAB = 7  # PAD, UNK, BOS, EOS and three word-pieces
GENERATABLE = [UNK, 4, 5, 6]


def peaky_model(seed: int, architecture: str = "transformer") -> Seq2Seq:
    """An untrained model with large weights: skewed but not degenerate next-token distributions."""
    torch.manual_seed(seed)
    config = ModelConfig(architecture=architecture, layers=1, d_model=16, d_ff=32, heads=2,
                         d_k=8, d_v=8, dropout=0.0)
    model = build_model(config, VOCAB).eval()
    with torch.no_grad():
        model.embedding.weight.mul_(4.0)
    return model


def sequence_log_prob(model: Seq2Seq, source: torch.Tensor, output: list[int]) -> float:
    target_input = torch.tensor([[BOS] + output[:-1]])
    log_probs = torch.log_softmax(model(source, target_input)[0], dim=-1)
    return sum(log_probs[position, token].item() for position, token in enumerate(output))


def exhaustive_search(model, source, alpha, max_length):
    """Best sequence ending with EOS of at most ``max_length`` tokens, by brute force."""
    best, best_score = None, float("-inf")
    for length in range(1, max_length + 1):
        for words in itertools.product(GENERATABLE, repeat=length - 1):
            output = list(words) + [EOS]
            score = sequence_log_prob(model, source, output) / length_penalty(length, alpha)
            if score > best_score:
                best, best_score = list(words), score
    return best, best_score


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_a_wide_beam_finds_the_exhaustive_optimum(seed, alpha, architecture):
    model = peaky_model(seed, architecture)
    source = torch.tensor([[4, 5, EOS]])  # 3 real tokens + offset 1 -> at most 4 output tokens
    expected, _ = exhaustive_search(model, source, alpha, max_length=4)
    # 4^3 = 64 live prefixes at most: a beam of 64 keeps every one of them.
    found = beam_search(model, source, beam_size=64, alpha=alpha, max_length_offset=1)
    assert found == [expected]


@pytest.mark.parametrize("alpha", [0.6, 1.5])
@pytest.mark.parametrize(("architecture", "seed"), [("transformer", 2), ("rnn", 1), ("rnn", 2)])
def test_terminating_early_changes_no_translation(monkeypatch, architecture, seed, alpha):
    """The early stop is exact: the same search run to every sentence's length limit (its
    bound pushed to 0, which no finished score reaches) gives the same translations, on
    sentences with room for longer outputs than the exhaustive tests' (offset 10). The EOS
    embedding, scaled up, makes ending likely enough for outputs of many lengths."""
    model = peaky_model(seed, architecture)
    with torch.no_grad():
        model.embedding.weight[EOS] *= 1.5
    decode, rows = model.decode, []
    model.decode = lambda target, *args: rows.append(target.size(0)) or decode(target, *args)
    batch = random_batch(11, 24)
    early = beam_search(model, batch, 4, alpha, 10)
    rows_early, rows[:] = sum(rows), []
    construct = _Search.__init__

    def never_early(search, *args, **kwargs):
        construct(search, *args, **kwargs)
        search.lp_at_limit = torch.full_like(search.lp_at_limit, float("inf"))

    monkeypatch.setattr(_Search, "__init__", never_early)
    assert beam_search(model, batch, 4, alpha, 10) == early
    assert rows_early <= 0.9 * sum(rows)  # sentences did stop early


@pytest.mark.parametrize("seed", range(6))
def test_the_default_beam_never_claims_more_than_the_exhaustive_optimum(seed):
    model = peaky_model(seed)
    source = torch.tensor([[4, 6, EOS]])
    _, best_score = exhaustive_search(model, source, 0.6, max_length=4)
    found = beam_search(model, source, beam_size=4, alpha=0.6, max_length_offset=1)[0]
    found_score = (sequence_log_prob(model, source, found + [EOS])
                   / length_penalty(len(found) + 1, 0.6))
    assert found_score <= best_score + 1e-6  # nothing can beat the exhaustive optimum


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_beam_of_one_equals_greedy_decoding(seed, architecture):
    model = peaky_model(seed, architecture)
    source = torch.tensor([[4, 5, 6, 5, EOS], [6, 4, EOS, PAD, PAD]])
    greedy = greedy_search(model, source, max_length_offset=6)
    assert beam_search(model, source, beam_size=1, alpha=0.0, max_length_offset=6) == greedy


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_a_sentence_decodes_the_same_alone_and_inside_a_padded_batch(architecture):
    model = peaky_model(7, architecture)
    sentences = [[4, 5, EOS], [6, 6, 4, 5, 4, EOS], [5, EOS]]
    alone = [beam_search(model, torch.tensor([s]), 4, 0.6, 5)[0] for s in sentences]
    batch = torch.full((3, 6), PAD)
    for row, sentence in enumerate(sentences):
        batch[row, : len(sentence)] = torch.tensor(sentence)
    assert beam_search(model, batch, 4, 0.6, 5) == alone


def test_length_penalty_formula():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(13, 0.0) == 1.0


@pytest.mark.parametrize("architecture", ["transformer", "rnn"])
def test_sentences_leaving_the_batch_early_do_not_change_the_others(architecture):
    """Done sentences are dropped from the batch step by step; every result equals decoding
    alone."""
    model = peaky_model(3, architecture)
    generator = torch.Generator().manual_seed(5)
    sentences = [torch.randint(4, VOCAB, (int(length),), generator=generator).tolist() + [EOS]
                 for length in torch.randint(1, 9, (12,), generator=generator)]
    batch = torch.full((12, max(map(len, sentences))), PAD)
    for row, sentence in enumerate(sentences):
        batch[row, : len(sentence)] = torch.tensor(sentence)
    alone = [beam_search(model, torch.tensor([s]), 4, 0.6, 4)[0] for s in sentences]
    assert beam_search(model, batch, 4, 0.6, 4) == alone


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_learned_positions_bound_the_output_length(seed):
    """Row E's decoder has no position beyond max_positions: the search ends there with EOS
    instead of asking the embedding for a position it does not have."""
    torch.manual_seed(seed)
    config = ModelConfig(layers=1, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8, dropout=0.0,
                         positional="learned", max_positions=5)
    model = build_model(config, VOCAB).eval()
    with torch.no_grad():
        model.embedding.weight[EOS] = 0.0  # EOS scores 0 against the others' large logits
        model.embedding.weight.mul_(4.0)
    source = torch.tensor([[4, 5, EOS]])
    output = beam_search(model, source, beam_size=4, alpha=0.6, max_length_offset=50)[0]
    assert len(output) + 1 <= config.max_positions  # its EOS included
    assert len(greedy_search(model, source, max_length_offset=50)[0]) + 1 <= config.max_positions


def random_batch(seed: int, sentences: int, vocab: int = VOCAB) -> Tensor:
    """``sentences`` random sources of 1 to 10 word-pieces and EOS, right-padded."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 11, (sentences,), generator=generator).tolist()
    batch = torch.full((sentences, max(lengths) + 1), PAD)
    for row, length in enumerate(lengths):
        batch[row, :length] = torch.randint(4, vocab, (length,), generator=generator)
        batch[row, length] = EOS
    return batch


@pytest.mark.parametrize(("architecture", "seed"), [("transformer", 0), ("transformer", 1),
                                                    ("transformer", 2), ("rnn", 3)])
def test_reading_which_sentences_are_done_every_few_steps_changes_no_translation(architecture,
                                                                                 seed):
    """Sentences done between two reads stay frozen in the batch: each translation is the one
    read at the step it finished, whatever the steps between reads, however many sentences
    finish between two reads."""
    model = peaky_model(seed, architecture)
    decode, rows = model.decode, []
    model.decode = lambda target, *args: rows.append(target.size(0)) or decode(target, *args)
    batch = random_batch(seed, 16)
    every_step = beam_search(model, batch, 4, 0.6, 6, check_every=1)
    assert len(set(rows)) > 3  # sentences left the batch at three steps at least
    for check_every in (2, 4, 8, 100):
        assert beam_search(model, batch, 4, 0.6, 6, check_every=check_every) == every_step


@pytest.mark.parametrize(("architecture", "seed"), [("transformer", 2), ("rnn", 0)])
@torch.inference_mode()
def test_a_sentence_done_between_reads_keeps_its_finished_hypotheses(architecture, seed):
    """Frozen on the device: later steps, which would finish better hypotheses of a sentence
    marked done early, change neither its finished scores nor their tokens; the other sentences
    find the best hypotheses they would have found."""
    model = peaky_model(seed, architecture)
    source = random_batch(seed, 6)

    def searched(freezes: bool) -> tuple[_Search, Tensor, Tensor]:
        search = _Search(model, source, 4, 0.6, 6, freezes=freezes)
        search.advance()
        search.done[0] = True
        after_one = search.finished_scores.clone(), search.finished_tokens.clone()
        for _ in range(2, 8):
            search.advance()
        return search, *after_one

    frozen, scores, tokens = searched(freezes=True)
    unfrozen, _, _ = searched(freezes=False)
    assert not torch.equal(unfrozen.finished_scores[0], scores[0])  # it would have changed
    assert torch.equal(frozen.finished_scores[0], scores[0])
    assert torch.equal(frozen.finished_tokens[0, :, : tokens.size(2)], tokens[0])
    assert frozen.finished_tokens[0, :, tokens.size(2):].eq(PAD).all()
    assert torch.equal(frozen.finished_tokens[1:, 0], unfrozen.finished_tokens[1:, 0])


class HostReads:
    """Counts the tensor methods that copy a value to the host (each waits for a GPU)."""

    METHODS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero")

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        for name in self.METHODS:
            monkeypatch.setattr(torch.Tensor, name, self._counting(getattr(torch.Tensor, name)))
        monkeypatch.setattr(torch, "nonzero", self._counting(torch.nonzero))

    def _counting(self, method):
        def counted(*args, **kwargs):
            self.count += 1
            return method(*args, **kwargs)
        return counted


def test_the_search_reads_the_device_once_every_check_every_steps(monkeypatch):
    """A sentence that only its length limit ends (EOS made unlikely) runs all 3 + 30 steps;
    the host reads which sentences are done after every ``check_every`` steps and at the last;
    the other reads (the longest output length, the encoder's layout of the source, the
    translation) are a few a batch, whatever ``check_every``: no per-step read (today's code
    read twice a step: at the length limit and for done sentences)."""
    model = peaky_model(8)
    with torch.no_grad():
        model.embedding.weight[EOS].mul_(-1.0)
    decode, steps = model.decode, []
    model.decode = lambda *args: steps.append(1) or decode(*args)
    source = torch.tensor([[4, 5, EOS]])
    reads = HostReads(monkeypatch)
    others = set()
    for check_every in (1, 4, 8):
        steps.clear()
        reads.count = 0
        beam_search(model, source, beam_size=4, alpha=0.6, max_length_offset=30,
                    check_every=check_every)
        assert len(steps) == 3 + 30
        checks = -(-len(steps) // check_every)
        others.add(reads.count - checks)
    assert len(others) == 1 and others.pop() <= 4


@pytest.mark.parametrize(("seed", "overrides"), [
    (0, {}), (1, {}), (2, {"attention_radius": 2}),
    (3, {"positional": "learned", "max_positions": 16}),
])
@pytest.mark.parametrize("stride", [2, 32])
def test_static_shapes_give_the_same_translations(seed, overrides, stride, monkeypatch):
    """``cuda_graphs``' static cache (keys and values in buffers of the batch's most positions,
    the next position read from the device, stale positions masked, a step reading a window that
    grows by ``stride`` positions), run eagerly on the CPU: the same translations as the growing
    cache, as sentences leave the batch at many steps."""
    monkeypatch.setattr(key_values, "READ_WINDOW_STRIDE", stride)
    torch.manual_seed(seed)
    config = ModelConfig(layers=2, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8, dropout=0.0,
                         **overrides)
    model = build_model(config, VOCAB).eval()
    with torch.no_grad():
        model.embedding.weight.mul_(4.0)
    batch = random_batch(seed, 16)
    for check_every in (1, 4):
        growing = beam_search(model, batch, 4, 0.6, 6, check_every=check_every)
        assert beam_search(model, batch, 4, 0.6, 6, check_every=check_every,
                           cuda_graphs=True) == growing


def test_with_cuda_graphs_a_batch_sheds_done_sentences_once_they_are_half_its_rows(monkeypatch):
    """A recorded step holds for one row count: with ``cuda_graphs`` a batch of 16 sentences that
    end at many steps keeps its done rows until they are half of them, so its row counts (the
    graphs it records) each halve at least, where the eager search sheds at every read; both
    give the same translations."""
    torch.manual_seed(0)
    config = ModelConfig(layers=2, d_model=16, d_ff=32, heads=2, d_k=8, d_v=8, dropout=0.0)
    model = build_model(config, VOCAB).eval()
    with torch.no_grad():
        model.embedding.weight.mul_(4.0)
    batch = random_batch(0, 16)
    seen: list[int] = []
    call = StepGraphs.__call__
    monkeypatch.setattr(StepGraphs, "__call__", lambda graphs, step, shape, device: (
        seen.append(shape[0]), call(graphs, step, shape, device))[1])

    def row_counts(**options) -> tuple[list[list[int]], list[int]]:
        seen.clear()
        translations = beam_search(model, batch, 4, 0.6, 6, **options)
        return translations, list(dict.fromkeys(seen))

    eager, shed_at_every_read = row_counts()
    graphed, shed_at_half = row_counts(cuda_graphs=True)
    assert graphed == eager
    assert len(shed_at_every_read) > len(shed_at_half) > 1
    assert all(2 * later <= earlier
               for earlier, later in itertools.pairwise(shed_at_half))


def test_static_shapes_are_refused_for_the_recurrent_baseline():
    """Its LSTM states are new tensors every step, which a replayed graph would not read."""
    with pytest.raises(ConfigError, match="cuda_graphs"):
        beam_search(peaky_model(0, "rnn"), random_batch(0, 2), cuda_graphs=True)


@torch.inference_mode()
def test_a_search_step_on_static_shapes_updates_its_state_in_place_reading_nothing(monkeypatch):
    """What replaying a whole step as a CUDA graph needs of it (``cuda_graphs``): once the first
    step has filled the caches, a step reads nothing from the device and writes every tensor of
    the search's state, the decoder's keys and values included, where it was."""
    model = peaky_model(0)
    search = _Search(model, random_batch(0, 6), 4, 0.6, 6, freezes=True, cuda_graphs=True)
    search.advance()

    def addresses() -> list[int]:
        state = [search.done, search.alive_scores, search.alive_tokens, search.finished_scores,
                 search.finished_tokens, search.step, search.cache.static.written]
        for layer in search.cache.layers:
            state += [*layer["self"].values(), *layer["cross"].values()]
        return [tensor.data_ptr() for tensor in state]

    before, reads = addresses(), HostReads(monkeypatch)
    with HostValuesCopied() as copied:
        search.advance()
        search.advance()
    assert reads.count == 0 and copied.operations == []
    assert addresses() == before
    assert int(search.step) == int(search.cache.static.written) == 3


class HostValuesCopied(TorchDispatchMode):
    """The operations that copy a value made on the host (a Python number or list lifted into a
    tensor: ``t[i] = v`` on a one-element destination, ``torch.tensor(...)``) into a tensor. On a
    GPU that is a copy from the host, which a CUDA graph's capture refuses; filling a slice with
    a number is a kernel, and is not counted."""

    def __init__(self):
        super().__init__()
        self.lifted: dict[int, Tensor] = {}  # held, so that no other tensor takes their ids
        self.operations: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.lift_fresh.default:
            self.lifted[id(result)] = result
        elif func is not torch.ops.aten.fill_.Tensor and any(
                id(arg) in self.lifted for arg in args if isinstance(arg, Tensor)):
            self.operations.append(str(func))
        return result


def reference_beam_search(model: Seq2Seq, source_ids: list[int], beam: int, alpha: float,
                          max_length_offset: int) -> list[int]:
    """Section 6.1's search as the module's docstring states it, written plainly for one sentence:
    the live prefixes scored by the decoder without a cache, in float64, run to the length limit
    (no early stop: it is claimed exact, so it changes no result). Each step extends the live
    hypotheses by every token (PAD and BOS never; only EOS at the limit, source length + offset)
    and takes the 2 x beam best; those among the first ``beam`` ending with EOS finish, scored
    log p / ((5 + |Y|) / 6) ** alpha; the ``beam`` best others stay alive."""
    max_length = len(source_ids) + max_length_offset
    alive: list[tuple[float, list[int]]] = [(0.0, [])]
    finished: list[tuple[float, list[int]]] = []
    for step in range(1, max_length + 1):
        prefixes = torch.tensor([[BOS] + tokens for _, tokens in alive])  # all step long
        with torch.no_grad():
            encoded = model.encode(torch.tensor([source_ids] * len(alive)))
            logits = model.decode(prefixes, encoded)[:, -1]
        candidates = []
        for (score, tokens), log_probs in zip(alive, torch.log_softmax(logits.double(), dim=-1),
                                              strict=True):
            candidates += [(score + log_prob, tokens + [token])
                           for token, log_prob in enumerate(log_probs.tolist())
                           if token not in (PAD, BOS) and (step < max_length or token == EOS)]
        candidates = sorted(candidates, key=lambda candidate: -candidate[0])[: 2 * beam]
        finished += [(score / ((5 + step) / 6) ** alpha, tokens)
                     for rank, (score, tokens) in enumerate(candidates)
                     if tokens[-1] == EOS and rank < beam]
        alive = [candidate for candidate in candidates if candidate[1][-1] != EOS][:beam]
        if not alive:
            break
    return max(finished, key=lambda hypothesis: hypothesis[0])[1][:-1]


def ending_likelier_with_length(model: Seq2Seq, per_position: float) -> Seq2Seq:
    """``model`` with its EOS logit raised by ``per_position`` x the output position (counted from
    1), with or without a cache: outputs then end at many lengths before their limit."""
    decode = model.decode

    def decode_ending(target: Tensor, encoded, cache: DecoderCache | None = None) -> Tensor:
        start = 0 if cache is None else cache.length  # positions decoded before these
        logits = decode(target, encoded, cache).clone()
        positions = torch.arange(start + 1, start + target.size(1) + 1, dtype=logits.dtype)
        logits[:, :, EOS] += per_position * positions
        return logits

    model.decode = decode_ending
    return model


@pytest.fixture
def one_thread():
    """The reference search runs a few hundred tiny forward passes: on one thread, where the
    threads of a small, busy machine would spin against each other (seconds instead of 0.3 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(("seed", "per_position"), [(4, 0.3), (1, 1.0)])
def test_the_default_search_equals_a_plain_reference_beam_search(seed, per_position):
    """The paper's settings (beam 4, alpha 0.6, source length + 50), taken from the defaults, on a
    padded batch: the same translations as the plain per-sentence search above. A wide beam finds
    the exhaustive optimum with fewer rules than these; this checks the rules themselves (2 x beam
    candidates, EOS finishing only among the first beam, alive refilled to the beam, the exact
    early stop, each sentence's own length limit)."""
    model = ending_likelier_with_length(peaky_model(seed), per_position)
    batch = random_batch(seed, 6)
    sentences = [row[row.ne(PAD)].tolist() for row in batch]
    expected = [reference_beam_search(model, sentence, 4, 0.6, 50) for sentence in sentences]
    assert len({len(tokens) for tokens in expected}) > 2
    assert beam_search(model, batch) == expected


def test_an_output_that_never_ends_by_itself_ends_at_source_length_plus_offset():
    """EOS kept out of reach (its logit lowered by 100): every sentence runs to its own limit,
    its real source tokens (EOS included) + ``max_length_offset`` output tokens, the last the EOS
    forced there: exactly source length + offset - 1 words, whatever the padding beside it."""
    model = peaky_model(8)
    decode = model.decode
    model.decode = lambda *args: decode(*args) - 100.0 * torch.eye(VOCAB)[EOS]
    batch = random_batch(8, 5)
    lengths = batch.ne(PAD).sum(dim=1).tolist()
    assert len(set(lengths)) > 1
    for offset in (1, 3, 50):
        outputs = beam_search(model, batch, beam_size=4, alpha=0.6, max_length_offset=offset)
        assert [len(output) for output in outputs] == [length + offset - 1 for length in lengths]


class ScriptedModel:
    """A stand-in for a model whose next-token probabilities are scripted: ``script(position,
    last_token)`` gives them (a probability per vocabulary entry, PAD and BOS 0) for output
    position ``position`` (from 1) after ``last_token``, with a cache or without one."""

    config = SimpleNamespace(architecture="transformer", position_limit=None)

    def __init__(self, script):
        self.script = script

    def eval(self) -> "ScriptedModel":
        return self

    def encode(self, source: Tensor) -> "ScriptedModel":
        return self  # the script reads no source

    def select(self, rows: Tensor) -> "ScriptedModel":
        return self

    def decode(self, target: Tensor, encoded, cache: DecoderCache | None = None) -> Tensor:
        start = 0 if cache is None else cache.length
        if cache is not None:
            cache.advance(target.size(1))
        return torch.tensor([[self.script(start + offset + 1, token)
                              for offset, token in enumerate(row)]
                             for row in target.tolist()]).clamp(min=1e-30).log()


def probabilities(**by_token: float) -> list[float]:
    """A distribution over the vocabulary from ``UNK=..., w4=..., w5=..., w6=..., EOS=...``."""
    names = {"UNK": UNK, "w4": 4, "w5": 5, "w6": 6, "EOS": EOS}
    distribution = [0.0] * VOCAB
    for name, probability in by_token.items():
        distribution[names[name]] = probability
    assert sum(distribution) == pytest.approx(1.0)
    return distribution


CERTAIN = {name: probabilities(**{name: 1.0}) for name in ("w4", "w5", "EOS")}
UNIFORM = probabilities(UNK=0.2, w4=0.2, w5=0.2, w6=0.2, EOS=0.2)


def test_an_eos_among_the_best_candidates_does_not_shrink_the_beam():
    """Beam 2, alpha 0.6. Step 1: w4 0.25, EOS 0.24, w5 0.23, UNK and w6 0.14. Of the 2 x 2 best
    candidates EOS (rank 1) finishes the empty output, log 0.24 = -1.427, and the beam is refilled
    with the next best that does not end: w4 and w5. After w5 EOS is certain: "w5 EOS" scores
    log 0.23 / lp(2) = -1.470 / 1.0969 = -1.340, better than the empty output; after w4 every
    token is 1/5 likely (-2.73 at best). Keeping only the top 2 candidates, or the first 2 whether
    they end or not, leaves w4 alone alive and returns the empty output."""
    def script(position: int, last: int) -> list[float]:
        if position == 1:
            return probabilities(w4=0.25, EOS=0.24, w5=0.23, UNK=0.14, w6=0.14)
        return CERTAIN["EOS"] if last == 5 else UNIFORM

    model, source = ScriptedModel(script), torch.tensor([[4, 4, EOS]])
    assert beam_search(model, source, beam_size=2, alpha=0.6, max_length_offset=3) == [[5]]
    assert reference_beam_search(model, [4, 4, EOS], 2, 0.6, 3) == [5]


def test_the_early_stop_waits_for_a_live_hypothesis_that_can_still_win_at_the_length_limit():
    """Beam 4, alpha 0.6, a source of 2 tokens and offset 3: at most 5 output tokens. Step 1: EOS
    0.47 finishes the empty output at log 0.47 = -0.755; w4 0.37 stays alive at -0.994, after
    which w4 then EOS are certain until the limit. Its best possible score is -0.994 / lp(5) =
    -0.994 / 1.3587 = -0.732, above -0.755: the search must go on, and "w4 w4 w4 w4 EOS" wins
    at -0.732. A bound from lp(4) = 1.2754 (-0.780) or from the current length would stop at
    step 1 with the empty output."""
    def script(position: int, last: int) -> list[float]:
        if position == 1:
            return probabilities(EOS=0.47, w4=0.37, UNK=0.16 / 3, w5=0.16 / 3, w6=0.16 / 3)
        return CERTAIN["w4"] if position < 5 else CERTAIN["EOS"]

    model, source = ScriptedModel(script), torch.tensor([[6, EOS]])
    assert beam_search(model, source, beam_size=4, alpha=0.6, max_length_offset=3) == [[4] * 4]
    assert reference_beam_search(model, [6, EOS], 4, 0.6, 3) == [4] * 4


def test_the_settings_reference_states_the_window_stride_the_search_uses():
    """decoding.cuda_graphs' description names the stride in words (the settings module does not
    import torch): it must be the one the static cache grows by."""
    description = DecodingConfig.model_fields["cuda_graphs"].description
    assert f"grows by {key_values.READ_WINDOW_STRIDE} positions" in description
