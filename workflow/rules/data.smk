"""Download -> extract and clean -> shared sentencepiece BPE -> binarized token ids.

The settings a step reads from the experiment file are its params, so that editing them replans
that step and what follows (rerun-triggers params)."""

import json


def split_settings(dataset, split):
    data = EXPERIMENTS[dataset].data
    sources = [source.model_dump(mode="json") for source in getattr(data, split)]
    return json.dumps({"sources": sources, "cleaning": data.cleaning.model_dump(mode="json")}, sort_keys=True)



rule download:
    output:
        f"{RESULTS}/downloads/{{filename}}",
    params:
        experiment=lambda wildcards: EXPERIMENT_FILES[DOWNLOADS[wildcards.filename][0]],
        split=lambda wildcards: DOWNLOADS[wildcards.filename][1],
        source=lambda wildcards: DOWNLOADS[wildcards.filename][2].name,
    log:
        f"{RESULTS}/logs/download/{{filename}}.log",
    shell:
        "{REPRODUCE} download --experiment {params.experiment} --split {params.split}"
        " --source {params.source} --out-dir {RESULTS}/downloads 2> {log}"


rule prepare:
    input:
        split_downloads,
    output:
        source=f"{RESULTS}/{{dataset}}/data/{{split}}.src",
        target=f"{RESULTS}/{{dataset}}/data/{{split}}.tgt",
        report=f"{RESULTS}/{{dataset}}/data/{{split}}.report.json",
    params:
        experiment=experiment_file,
        settings=lambda wildcards: split_settings(wildcards.dataset, wildcards.split),
    log:
        f"{RESULTS}/logs/{{dataset}}/prepare_{{split}}.log",
    shell:
        "{REPRODUCE} prepare --experiment {params.experiment} --split {wildcards.split}"
        " --downloads {RESULTS}/downloads --out-dir {RESULTS}/{wildcards.dataset}/data 2> {log}"


rule train_bpe:
    input:
        source=f"{RESULTS}/{{dataset}}/data/train.src",
        target=f"{RESULTS}/{{dataset}}/data/train.tgt",
    output:
        model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        vocab=f"{RESULTS}/{{dataset}}/bpe/spm.vocab",
    params:
        experiment=experiment_file,
        settings=lambda wildcards: EXPERIMENTS[wildcards.dataset].bpe.model_dump_json(),
    threads: 16  # capped to --cores when run locally
    log:
        f"{RESULTS}/logs/{{dataset}}/train_bpe.log",
    shell:
        "{REPRODUCE} train-bpe --experiment {params.experiment} --source {input.source}"
        " --target {input.target} --model-prefix {RESULTS}/{wildcards.dataset}/bpe/spm 2> {log}"


rule encode:
    input:
        model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        source=f"{RESULTS}/{{dataset}}/data/{{split}}.src",
        target=f"{RESULTS}/{{dataset}}/data/{{split}}.tgt",
    output:
        directory(f"{RESULTS}/{{dataset}}/encoded/{{split}}"),
    threads: 16  # capped to --cores when run locally
    log:
        f"{RESULTS}/logs/{{dataset}}/encode_{{split}}.log",
    shell:
        "{REPRODUCE} encode --spm-model {input.model} --source {input.source}"
        " --target {input.target} --out-dir {output} 2> {log}"
