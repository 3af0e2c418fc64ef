"""What a researcher sees on opening MLflow's UI (3.17): the key results as the runs table's
columns, a variant's seeds gathered under it, the summary apart from the training curves, and
the address that opens them.

The runs table shows, by default, only the Source, Models and Dataset attributes; its metric
and param columns stay behind *Columns* until chosen. MLflow's UI can open a view that someone
shared: the experiment tag ``mlflow.sharedViewState.<key>`` holds the view as JSON, and the
experiment page's URL parameter ``viewStateShareKey=<key>`` opens it (the UI's bundle reads the
tag, parses its value as JSON, and takes ``selectedColumns`` and the other UI-state fields from it,
the search facets too unless the URL has its own). Each variant experiment carries the view
:data:`KEY_RESULTS_VIEW`, whose columns are each run's seed and :data:`KEY_RESULTS`, its runs
grouped by variant (:data:`BY_VARIANT`) and sorted by name, and :func:`addresses` gives the URL
that opens it: the experiment's ``/runs`` page itself (``#/experiments/<id>`` redirects there and
drops the parameter), with ``workflowType=machine_learning``: MLflow 3.17 picks its GenAI or Model
training pages from that switch (remembered by the browser, GenAI at first), not from the
experiment's ``mlflow.experimentKind`` tag.

The summary of a training is logged as ``summary/<name>`` at step 0 (:func:`summary_metric`). In
MLflow 3.17 the charts of both the run page (*Model metrics*) and the experiment page come from
``RunsChartsCardConfig.getBaseChartAndSectionConfigs``: a metric gets a line chart when some
run's latest value of it was logged at a step >= 1 (``dataTraceMetricsContainMultipleEpochs``),
a bar chart otherwise (one bar per run); and it falls in the chart section named by the part of
its name before the last ``/`` (*Model metrics* when there is none, *System metrics* for
``system/``), the named sections shown first. Logged at the training's last step, the summary
would make sixteen one-point line charts among the curves; at step 0 and under ``summary/``, it
is one section of bars, one per variant, beside *Model metrics* where the curves stay (train
loss, learning rate, tokens/s, dev loss and perplexity per evaluation, logged at their steps).
The scores are logged at step 0 too (bars), under plain names
(``<split>_<checkpoint>_<score>``), which the pipeline's tests and users' queries name. The run
page's overview lists every metric's latest value either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from reproduce.errors import MissingInputError
from reproduce.tracking.store import (
    embedded_uri, host_header, is_server, prepare_store, redact, tracking_uri,
)

KEY_RESULTS_VIEW = "key-results"
VIEW_STATE_TAG = f"mlflow.sharedViewState.{KEY_RESULTS_VIEW}"
SUMMARY_SECTION = "summary"
# The URL parameter of MLflow 3.17's UI that opens its Model training pages, not its GenAI ones.
MODEL_TRAINING = "workflowType=machine_learning"
# What a tables run opens on, the first of these it holds.
MAIN_TABLES = ("table3.html", "table4.html", "scores.html")
# `mlflow ui`'s address unless told otherwise (its --host and --port defaults).
DEFAULT_UI = "http://127.0.0.1:5000"


def score_metric(split: str, checkpoint: str, name: str) -> str:
    """A score's metric name, ``<split>_<checkpoint>_<name>``: ``test_averaged_sacrebleu``."""
    return f"{split}_{checkpoint}_{name}"


def summary_metric(name: str) -> str:
    """A summary value's metric name: ``summary/<name>``, in the chart section ``summary``."""
    return f"{SUMMARY_SECTION}/{name}"


def _column(kind: str, key: str) -> str:
    """A runs-table column as the UI names it (``metrics.`name```)."""
    return f"{kind}.`{key}`"


# The key results, as the runs table's columns, in this order: the scores that Tables 2-4 print
# (tokenized BLEU and sacreBLEU of the averaged model on test and of the last weights on dev, as
# the pipeline scores them, or for parsing the labelled-bracket F1), dev perplexity, the model's
# size and the GPU-hours. Both tasks' columns: MLflow shows a column only for a key that some run
# of the experiment has, so a translation experiment shows no F1 column and a parsing one no BLEU.
KEY_RESULTS = [
    *(_column("metrics", score_metric("test", "averaged", name))
      for name in ("tokenized_bleu", "sacrebleu", "f1")),
    *(_column("metrics", score_metric("dev", "last", name))
      for name in ("tokenized_bleu", "sacrebleu", "f1", "perplexity")),
    _column("params", "parameters"),
    _column("metrics", summary_metric("gpu_hours")),
]


# The view's columns: the run's seed (its ``seed`` tag; a variant is trained with each of its
# seeds), then the key results.
SEED_COLUMN = _column("tags", "seed")
VIEW_COLUMNS = [SEED_COLUMN, *KEY_RESULTS]
# The runs grouped by their ``variant`` tag, as the runs table's *Group by* does: one row per
# variant with the average of its seeds' values, its seeds' runs below it (expanded). MLflow 3.17's
# ``RunsGroupByConfig``: modes ``tag``, ``param``, ``dataset``; ``min``, ``average`` or ``max``.
BY_VARIANT = {"aggregateFunction": "average",
              "groupByKeys": [{"mode": "tag", "groupByData": "variant"}]}
# The runs sorted by name, not by start (the UI's default, newest first): the variants in a
# stable order and each one's seeds in theirs, however the trainings were scheduled. A search
# facet, which the UI takes from the view too.
BY_NAME = {"orderByKey": _column("tags", "mlflow.runName"), "orderByAsc": True}
# The run-name column, wide enough for a group's label (``Group: E_learned`` and its count); the
# UI applies the widths of the columns in ``columnOrder`` only.
RUN_NAME_COLUMN = _column("attributes", "Run Name")
RUN_NAME_WIDTH = 240


def key_results_view_state() -> str:
    """The view's JSON: the seed and key-result columns selected, in their order and wide enough
    for their names, the runs grouped by variant and sorted by name (the UI's other fields at its
    defaults)."""
    widths = {column: _width(column) for column in VIEW_COLUMNS}
    return json.dumps({"selectedColumns": VIEW_COLUMNS,
                       "columnOrder": [RUN_NAME_COLUMN, *VIEW_COLUMNS],
                       "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH, **widths},
                       "groupBy": BY_VARIANT, **BY_NAME})


def _width(column: str) -> int:
    """Pixels that show a column's name whole in the runs table's header (about 6 px a character
    in its 13 px font, and the header's padding and sort icon)."""
    return 6 * len(column.split("`")[1]) + 40


def _main_table(client, run_id: str) -> str:
    """The artifact a tables run opens on: the experiment's main table (Table 3, or Table 4 for
    parsing), else the scores per variant; MLflow's artifact viewer shows ``.html`` inline."""
    logged = {Path(item.path).name for item in client.list_artifacts(run_id, "tables")}
    return next((f"tables/{name}" for name in MAIN_TABLES if name in logged), "tables")


def ui_base(results_dir: Path, ui: str | None = None) -> str:
    """Where the UI of the store is: ``ui`` when given, else the tracking server's address
    (credentials left out: a browser asks for them), else `mlflow ui`'s default."""
    uri = tracking_uri(results_dir)
    if ui is None and is_server(uri):
        parts = urlsplit(uri)
        ui = urlunsplit((parts.scheme, host_header(parts), parts.path, "", ""))
    return (ui or DEFAULT_UI).rstrip("/")


def addresses(results_dir: Path, ui: str | None = None) -> dict[str, str]:
    """By experiment name, the URL of each variant experiment's runs table with the key results
    shown, and of each tables experiment's run, its artifacts (the rendered tables)."""
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(results_dir)
    database = Path(embedded_uri(results_dir)[len("sqlite:///"):])
    if uri == embedded_uri(results_dir) and not database.exists():
        raise MissingInputError(f"{database}: no MLflow store there yet; run the pipeline first")
    prepare_store(results_dir)
    client = MlflowClient(uri)
    base = ui_base(results_dir, ui)
    found = {}
    for experiment in client.search_experiments():
        page = f"{base}/#/experiments/{experiment.experiment_id}"
        if VIEW_STATE_TAG in experiment.tags:
            found[experiment.name] = (f"{page}/runs?viewStateShareKey={KEY_RESULTS_VIEW}"
                                      f"&{MODEL_TRAINING}")
        else:  # a tables experiment (<dataset> tables)
            for run in client.search_runs([experiment.experiment_id], "tags.kind = 'tables'"):
                shown = _main_table(client, run.info.run_id)
                found[experiment.name] = (f"{page}/runs/{run.info.run_id}/artifacts/{shown}"
                                          f"?{MODEL_TRAINING}")
    if not found:
        raise MissingInputError(f"MLflow store {redact(uri)}: no experiment of this project in it"
                                " yet; run the pipeline first")
    return dict(sorted(found.items()))
