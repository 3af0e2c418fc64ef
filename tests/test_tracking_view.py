"""The key-results view that MLflow's UI opens (:mod:`reproduce.tracking.view`): what its JSON
asks of the runs table, against what the runs record in a real embedded store.
(``tests/test_mlflow_ui.py`` opens it in a browser.)"""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from reproduce.tracking import start_variant_run, tracking_uri
from reproduce.tracking.view import (
    KEY_RESULTS, RUN_NAME_COLUMN, SEED_COLUMN, VIEW_STATE_TAG, key_results_view_state,
)


def _view(results) -> dict:
    """The view as the dataset's experiment carries it."""
    experiment = MlflowClient(tracking_uri(results)).get_experiment_by_name("tiny")
    return json.loads(experiment.tags[VIEW_STATE_TAG])


def test_the_view_shows_each_runs_seed_tag_before_the_key_results(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = start_variant_run(tmp_path, "tiny", "A_h1", 2, "A", tmp_path / "A_h1")
    view = _view(tmp_path)
    assert view == json.loads(key_results_view_state())
    assert view["selectedColumns"] == [SEED_COLUMN, *KEY_RESULTS]
    # the run name first, wide enough for a group's label (Group: E_learned)
    assert view["columnOrder"] == [RUN_NAME_COLUMN, SEED_COLUMN, *KEY_RESULTS]
    assert set(view["columnWidths"]) == set(view["columnOrder"])
    assert view["columnWidths"][RUN_NAME_COLUMN] >= 200
    # the column is the tag the run carries: tags.`seed`
    kind, key = SEED_COLUMN.split(".", 1)
    tags = MlflowClient(tracking_uri(tmp_path)).get_run(run.run_id).data.tags
    assert kind == "tags" and tags[key.strip("`")] == "2"


def test_the_view_gathers_a_variants_seeds_under_its_variant_tag(tmp_path, monkeypatch):
    """Grouped by the ``variant`` tag, their average in the group's row; sorted by run name, so
    that each variant's seeds come in their order, whenever each training started."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for variant, seed in (("base", 2), ("A_h1", 2), ("base", 1), ("A_h1", 1)):
        start_variant_run(tmp_path, "tiny", variant, seed, None, tmp_path / f"{variant}-{seed}")
    view = _view(tmp_path)
    assert view["groupBy"] == {"aggregateFunction": "average",
                               "groupByKeys": [{"mode": "tag", "groupByData": "variant"}]}
    # the runs as the UI asks the store for them (the view's sort)
    client = MlflowClient(tracking_uri(tmp_path))
    order = f"{view['orderByKey']} {'ASC' if view['orderByAsc'] else 'DESC'}"
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id],
                              order_by=[order])
    assert [(run.data.tags["variant"], run.info.run_name) for run in runs] == [
        ("A_h1", "A_h1 seed 1"), ("A_h1", "A_h1 seed 2"),
        ("base", "base seed 1"), ("base", "base seed 2")]
