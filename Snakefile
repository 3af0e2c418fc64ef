"""Attention Is All You Need, end to end: data -> BPE -> training -> averaging -> beam search ->
BLEU -> Tables 2 and 3. Every step is a call to the `reproduce` package's command line.

    snakemake --cores 2 all                                  # the embedded tiny default
    snakemake --cores 2 results/tiny/A_h1/seed-1/bleu.json   # one variant's chain only
    snakemake --profile slurm all                            # the paper's WMT14 runs on Slurm
    snakemake --report report.html                           # tables, plots and BLEU in one page
"""

from snakemake.utils import min_version, validate

min_version("9.20")


configfile: "configs/pipelines/tiny.yaml"


validate(config, "workflow/schemas/pipeline.schema.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/references.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/table1.smk"
include: "workflow/rules/figures.smk"


onstart:
    # Before anything runs: SIGTERM and SIGINT to Snakemake stop its trainings too (train.smk).
    relay_stop_signals(STOP_REQUESTS)
    # Snakemake's own interpreter (it imports reproduce to validate the experiments), also
    # under --sdm conda, whose environments exist only for the jobs.
    shell(
        "{python:q} -m reproduce init-tracking --results {results:q}",
        python=sys.executable,
        results=RESULTS,
    )


rule all:
    default_target: True
    input:
        [table_files(dataset) for dataset in EXPERIMENTS],
