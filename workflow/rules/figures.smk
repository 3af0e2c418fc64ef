"""Figures 3-5: attention heads of a variant's averaged model on test sentences, for encoder
self-attention, decoder self-attention and encoder-decoder attention, with the model's own
translation as the decoder's input. Not part of `all`: ask for a variant's folder, e.g.
`snakemake --cores 2 results/tiny/base/seed-1/figures`. Other sentences or layers: run
`python -m reproduce attention --help` directly."""


rule attention_figures:
    input:
        checkpoint=f"{SEED_DIR}/averaged.pt",
        spm_model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        source=f"{RESULTS}/{{dataset}}/data/test.src",
        translations=f"{SEED_DIR}/translations/test.averaged.txt",
    output:
        directory(f"{SEED_DIR}/figures"),
    log:
        log_file("{dataset}/attention_figures_{variant}_seed{seed}"),
    conda:
        CONDA_ENV
    params:
        results=tracking_root,
        sentences="0,1,2",  # the first three test sentences; the last layer (the default)
    shell:
        "python -m reproduce attention --checkpoint {input.checkpoint:q}"
        " --spm-model {input.spm_model:q} --source {input.source:q}"
        " --target {input.translations:q} --sentences {params.sentences:q} --out-dir {output:q}"
        " --results {params.results:q} --dataset {wildcards.dataset:q}"
        " --variant {wildcards.variant:q} --seed {wildcards.seed} > {log:q} 2>&1"
