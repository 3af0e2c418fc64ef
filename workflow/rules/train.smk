"""Training of one variant with one of its seeds (resumable from its checkpoints; each seed of
training.seed is a training of its own, in <variant>/seed-<n>/) and averaging of its last
checkpoints on the save grid, those that training lists in train/checkpoints.json."""

from reproduce.training.interruption import relay_stop_signals

# Where Snakemake's stop requests go (relay_stop_signals, called at onstart): told to stop, it
# waits for its running jobs and signals none, so a training learns of it from this file; the
# job then fails without outputs, and the next run resumes it from its checkpoint.
STOP_REQUESTS = Path(".snakemake/stop-requests")


rule train:
    input:
        # the encoded splits; a finished run whose settings were edited is refused while
        # Snakemake plans, before it would delete the run's outputs to retrain it
        unpack(training_inputs),
    output:
        final=f"{SEED_DIR}/train/final.pt",
        summary=f"{SEED_DIR}/train/summary.json",
        # the kept checkpoints on the save grid (names, steps, sha256): what `average` reads
        checkpoints=f"{SEED_DIR}/train/checkpoints.json",
    log:
        log_file("{dataset}/train_{variant}_seed{seed}"),
    benchmark:
        benchmark_file("{dataset}/train_{variant}_seed{seed}")
    priority: training_priority
    # With the slurm launcher this rule runs where snakemake runs: it submits the training job
    # through submitit (one task per GPU, requeued at its time limit) and waits for it. Its
    # request is this rule's resources: set-resources: train in the profile (slurm/config.yaml).
    localrule: config["training"]["launcher"] == "slurm"
    conda:
        CONDA_ENV
    threads: config["training"].get("threads", 1)
    params:
        experiment=experiment_file,
        out_dir=SEED_DIR,
        results=tracking_root,
        launcher=config["training"]["launcher"],
        tasks=config["training"].get("tasks", 1),
        fingerprint=training_fingerprint,
        steps=steps_param,  # raising steps continues the run from its last checkpoint
    # A script, which sees every resource by name: with the slurm launcher, the rule's resources
    # (set in the profile) are the training job's Slurm request.
    script:
        "../scripts/train.py"


rule average:
    input:
        # Lists the checkpoints it averages (the folder itself is training's working state,
        # which Snakemake cannot see into); their sha256 is checked against it.
        manifest=f"{SEED_DIR}/train/checkpoints.json",
    output:
        f"{SEED_DIR}/averaged.pt",
    log:
        log_file("{dataset}/average_{variant}_seed{seed}"),
    conda:
        CONDA_ENV
    params:
        last=lambda wildcards: EXPERIMENTS[wildcards.dataset]
        .variant(wildcards.variant)
        .training.average_last,
    shell:
        "python -m reproduce average --manifest {input.manifest:q}"
        " --last {params.last} --out {output:q} > {log:q} 2>&1"
