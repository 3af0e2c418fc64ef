"""The official dev/test references that BLEU is scored against, read from the released files as
sacreBLEU reads them (no normalisation or cleaning: those apply to what the model sees)."""


rule references:
    input:
        downloads=lambda wildcards: [
            f"{RESULTS}/downloads/{download_name(source)}"
            for source in getattr(EXPERIMENTS[wildcards.dataset].data, wildcards.evaluated_split)
        ],
        source=f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.src",
    output:
        f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.ref",
    log:
        log_file("{dataset}/references_{evaluated_split}"),
    conda:
        CONDA_ENV
    params:
        experiment=experiment_file,
        downloads=f"{RESULTS}/downloads",
    shell:
        "python -m reproduce references --experiment {params.experiment:q}"
        " --split {wildcards.evaluated_split:q} --downloads {params.downloads:q}"
        " --source-lines {input.source:q} --out {output:q} > {log:q} 2>&1"
