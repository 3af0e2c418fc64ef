"""Tables 2 and 3 beside the paper's numbers, as markdown, CSV and plots."""


rule final_tables:
    input:
        lambda wildcards: [
            f"{variant_dir(wildcards.dataset, variant)}/bleu.json"
            for variant in EXPERIMENTS[wildcards.dataset].variants
        ],
    output:
        [f"{RESULTS}/{{dataset}}/tables/{name}" for name in TABLE_NAMES],
    params:
        experiment=experiment_file,
    shell:
        "{REPRODUCE} tables --experiment {params.experiment} --results {RESULTS}"
        " --out-dir {RESULTS}/{wildcards.dataset}/tables"


rule tables:
    """Render whatever has finished, marking missing cells; never triggers training."""
    run:
        for dataset, experiment_path in EXPERIMENT_FILES.items():
            shell(
                "{REPRODUCE} tables --experiment {experiment_path} --results {RESULTS}"
                " --out-dir {RESULTS}/{dataset}/tables"
            )
