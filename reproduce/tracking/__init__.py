"""MLflow tracking: the store (:mod:`.store`), the runs (:mod:`.runs`), the corpora
(:mod:`.datasets`).

Only rank 0 ever calls into this package.
"""

from reproduce.tracking.runs import (
    RUN_ID_FILE, VariantRun, find_variant_run, flat_params, log_best_effort, run_description,
    start_training_run, start_variant_run, tables_run, variant_run_for,
)
from reproduce.tracking.store import (
    prepare_store, redact, redact_credentials_in_logs, tracking_uri,
)

__all__ = [
    "RUN_ID_FILE", "VariantRun", "find_variant_run", "flat_params",
    "log_best_effort", "prepare_store", "redact", "redact_credentials_in_logs", "run_description",
    "start_training_run",
    "start_variant_run", "tables_run", "tracking_uri", "variant_run_for",
]
