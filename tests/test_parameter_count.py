"""Parameter counts follow the analytic formula for every Table 3 shape (and the rnn variant)."""

from pathlib import Path

import pytest

from reproduce.experiment_file import load_experiment
from reproduce.model.parameter_count import analytic_parameter_count
from reproduce.model.architectures import build_model

EXPERIMENT = load_experiment(Path(__file__).parents[1] / "configs/wmt14_en_de.yaml")


@pytest.mark.parametrize("variant", list(EXPERIMENT.variants))
def test_module_count_equals_the_formula_for_every_table3_row(variant):
    config = EXPERIMENT.variant(variant).model
    # Scaled down in width so the test is fast; the formula is checked term by term all the same.
    small = config.model_copy(update={
        "d_model": config.d_model // 16, "d_ff": config.d_ff // 16,
        "d_k": max(1, config.d_k // 16), "d_v": max(1, config.d_v // 16),
    })
    assert build_model(small, 100).num_parameters() == analytic_parameter_count(small, 100)


def test_base_model_with_a_37k_vocabulary_has_about_the_papers_65_million():
    count = analytic_parameter_count(EXPERIMENT.variant("base").model, 37000)
    assert 60e6 < count < 66e6
    big = analytic_parameter_count(EXPERIMENT.variant("big").model, 37000)
    assert 205e6 < big < 220e6
