"""Training of one variant (resumable from its checkpoints) and averaging of its last checkpoints."""

from reproduce.config import fingerprint, trained_settings


def training_fingerprint(wildcards):
    """Digest of what the variant's weights depend on: a changed value replans this variant's
    training and what follows it, and nothing else (rerun-triggers params)."""
    experiment = EXPERIMENTS[wildcards.dataset]
    return fingerprint(trained_settings(experiment.variant(wildcards.variant), experiment))


def training_steps(wildcards):
    return EXPERIMENTS[wildcards.dataset].variant(wildcards.variant).training.steps



rule train:
    # With the slurm launcher this rule runs where snakemake runs: it submits the training job
    # through submitit (one task per GPU, requeued at its time limit) and waits for it.
    localrule: config["training"]["launcher"] == "slurm"
    input:
        train=f"{RESULTS}/{{dataset}}/encoded/train",
        dev=f"{RESULTS}/{{dataset}}/encoded/dev",
    output:
        final=f"{RESULTS}/{{dataset}}/{{variant}}/train/final.pt",
        summary=f"{RESULTS}/{{dataset}}/{{variant}}/train/summary.json",
    params:
        experiment=experiment_file,
        launcher=config["training"]["launcher"],
        tasks=config["training"].get("tasks", 1),
        fingerprint=training_fingerprint,
        steps=training_steps,  # raising steps continues the run from its last checkpoint
    threads: config["training"].get("threads", 1)
    log:
        f"{RESULTS}/logs/{{dataset}}/train_{{variant}}.log",
    shell:
        "{REPRODUCE} train --experiment {params.experiment} --variant {wildcards.variant}"
        " --train-data {input.train} --dev-data {input.dev}"
        " --out-dir {RESULTS}/{wildcards.dataset}/{wildcards.variant} --results {RESULTS}"
        " --launcher {params.launcher} --tasks {params.tasks} --threads {threads} 2> {log}"


rule average:
    input:
        f"{RESULTS}/{{dataset}}/{{variant}}/train/final.pt",
    output:
        f"{RESULTS}/{{dataset}}/{{variant}}/averaged.pt",
    params:
        last=lambda wildcards: EXPERIMENTS[wildcards.dataset]
        .variant(wildcards.variant)
        .training.average_last,
    log:
        f"{RESULTS}/logs/{{dataset}}/average_{{variant}}.log",
    shell:
        "{REPRODUCE} average --checkpoint-dir {RESULTS}/{wildcards.dataset}/{wildcards.variant}/checkpoints"
        " --last {params.last} --out {output} 2> {log}"
