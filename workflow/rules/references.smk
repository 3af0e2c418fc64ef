"""The official dev/test references that BLEU is scored against, read from the released files as
sacreBLEU reads them (no normalisation or cleaning: those apply to what the model sees)."""


rule references:
    input:
        downloads=lambda wildcards: [
            f"{RESULTS}/downloads/{download_name(source.url)}"
            for source in getattr(EXPERIMENTS[wildcards.dataset].data, wildcards.evaluated_split)
        ],
        source=f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.src",
    output:
        f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.ref",
    params:
        experiment=experiment_file,
    log:
        f"{RESULTS}/logs/{{dataset}}/references_{{evaluated_split}}.log",
    shell:
        "{REPRODUCE} references --experiment {params.experiment} --split {wildcards.evaluated_split}"
        " --downloads {RESULTS}/downloads --source-lines {input.source} --out {output} 2> {log}"
