"""Download -> extract and clean -> shared sentencepiece BPE -> binarized token ids.

The settings a step reads from the experiment file are its params, so that editing them replans
that step and what follows (rerun-triggers params)."""


localrules:
    download,  # compute nodes often have no internet: fetch where Snakemake runs


rule download:
    output:
        f"{RESULTS}/downloads/{{filename}}",
    log:
        log_file("download/{filename}"),
    priority: DATA_PRIORITY
    conda:
        CONDA_ENV
    params:
        experiment=lambda wildcards: EXPERIMENT_FILES[DOWNLOADS[wildcards.filename][0]],
        split=lambda wildcards: DOWNLOADS[wildcards.filename][1],
        source=lambda wildcards: DOWNLOADS[wildcards.filename][2].name,
        out_dir=lambda wildcards, output: os.path.dirname(output[0]),
    shell:
        "python -m reproduce download --experiment {params.experiment:q}"
        " --split {params.split:q} --source {params.source:q} --out-dir {params.out_dir:q}"
        " > {log:q} 2>&1"


rule prepare:
    input:
        split_downloads,
    output:
        source=f"{RESULTS}/{{dataset}}/data/{{split}}.src",
        target=f"{RESULTS}/{{dataset}}/data/{{split}}.tgt",
        report=f"{RESULTS}/{{dataset}}/data/{{split}}.report.json",
    log:
        log_file("{dataset}/prepare_{split}"),
    benchmark:
        benchmark_file("{dataset}/prepare_{split}")
    priority: DATA_PRIORITY
    conda:
        CONDA_ENV
    params:
        experiment=experiment_file,
        downloads=f"{RESULTS}/downloads",
        out_dir=f"{RESULTS}/{{dataset}}/data",
        settings=lambda wildcards: split_settings(wildcards.dataset, wildcards.split),
    shell:
        "python -m reproduce prepare --experiment {params.experiment:q}"
        " --split {wildcards.split:q} --downloads {params.downloads:q}"
        " --out-dir {params.out_dir:q} > {log:q} 2>&1"


rule train_bpe:
    input:
        source=f"{RESULTS}/{{dataset}}/data/train.src",
        target=f"{RESULTS}/{{dataset}}/data/train.tgt",
    output:
        model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        vocab=f"{RESULTS}/{{dataset}}/bpe/spm.vocab",
    log:
        log_file("{dataset}/train_bpe"),
    benchmark:
        benchmark_file("{dataset}/train_bpe")
    priority: DATA_PRIORITY
    conda:
        CONDA_ENV
    # One core locally, so that this job of seconds starts beside running trainings instead of
    # waiting for cores that they hold (the Slurm profile gives it 16: set-threads).
    threads: 1
    params:
        experiment=experiment_file,
        model_prefix=f"{RESULTS}/{{dataset}}/bpe/spm",
        settings=lambda wildcards: EXPERIMENTS[wildcards.dataset].bpe.model_dump_json(),
    shell:
        "python -m reproduce train-bpe --experiment {params.experiment:q}"
        " --source {input.source:q} --target {input.target:q}"
        " --model-prefix {params.model_prefix:q} --threads {threads} > {log:q} 2>&1"


rule encode:
    input:
        model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        source=f"{RESULTS}/{{dataset}}/data/{{split}}.src",
        target=f"{RESULTS}/{{dataset}}/data/{{split}}.tgt",
    output:
        directory(f"{RESULTS}/{{dataset}}/encoded/{{split}}"),
    log:
        log_file("{dataset}/encode_{split}"),
    benchmark:
        benchmark_file("{dataset}/encode_{split}")
    priority: DATA_PRIORITY
    conda:
        CONDA_ENV
    # One core locally, so that this job of seconds starts beside running trainings instead of
    # waiting for cores that they hold (the Slurm profile gives it 16: set-threads).
    threads: 1
    shell:
        "python -m reproduce encode --spm-model {input.model:q}"
        " --source {input.source:q} --target {input.target:q} --out-dir {output:q}"
        " --threads {threads} > {log:q} 2>&1"
