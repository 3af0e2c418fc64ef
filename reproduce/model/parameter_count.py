"""Analytic parameter count of the model, the formula behind Table 3's last column (and of the
recurrent baseline, :func:`recurrent_parameter_count`)."""

from reproduce.config import ModelConfig


def analytic_parameter_count(config: ModelConfig, vocab_size: int) -> int:
    """Parameters of :class:`reproduce.model.transformer.Transformer` for ``config``.

    shared embedding V*d (also the output projection), plus per layer:
      attention:     d*h*(2*d_k + d_v) + h*(2*d_k + d_v)   (Q, K, V projections with biases)
                   + h*d_v*d + d                            (output projection W^O)
      feed-forward:  d*d_ff + d_ff + d_ff*d + d
      layer norm:    2*d each (one per sub-layer)
    encoder layers have 1 attention + FFN + 2 norms, decoder layers 2 attentions + FFN + 3 norms;
    a learned positional embedding adds max_positions*d. An rnn configuration is counted by
    :func:`recurrent_parameter_count`.
    """
    if config.architecture == "rnn":
        return recurrent_parameter_count(config, vocab_size)
    d, h = config.d_model, config.heads
    attention = d * h * (2 * config.d_k + config.d_v) + h * (2 * config.d_k + config.d_v)
    attention += h * config.d_v * d + d
    feed_forward = d * config.d_ff + config.d_ff + config.d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    total = vocab_size * d + config.layers * (encoder_layer + decoder_layer)
    if config.positional == "learned":
        total += config.max_positions * d
    return total


def recurrent_parameter_count(config: ModelConfig, vocab_size: int) -> int:
    """Parameters of :class:`reproduce.model.recurrent.RecurrentSeq2Seq` for ``config``.

    shared embedding V*d; an LSTM layer of u units over inputs of width i has 4u(i + u) weights
    and 2 x 4u biases (nn.LSTM's b_ih and b_hh); the encoder has two directions of u = d/2 per
    layer (inputs d wide), the decoder u = d; attention W d^2 (additive adds W_1 d^2 and v_a d);
    the combination W_c 2d^2.
    """
    d, layers = config.d_model, config.layers

    def lstm_layer(inputs: int, units: int) -> int:
        return 4 * units * (inputs + units) + 2 * 4 * units

    attention = d * d + (d * d + d if config.rnn_attention == "additive" else 0)
    return (vocab_size * d + layers * (2 * lstm_layer(d, d // 2) + lstm_layer(d, d))
            + attention + 2 * d * d)
