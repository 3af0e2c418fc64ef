"""Figures 3-5: attention heads of a variant's averaged model on test sentences, for encoder
self-attention, decoder self-attention and encoder-decoder attention, with the model's own
translation as the decoder's input. Not part of `all`: ask for a variant's folder, e.g.
`snakemake --cores 2 results/tiny/base/figures`. Other sentences or layers: run
`python -m reproduce attention --help` directly."""


rule attention_figures:
    input:
        checkpoint=f"{RESULTS}/{{dataset}}/{{variant}}/averaged.pt",
        spm_model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        source=f"{RESULTS}/{{dataset}}/data/test.src",
        translations=f"{RESULTS}/{{dataset}}/{{variant}}/translations/test.averaged.txt",
    output:
        directory(f"{RESULTS}/{{dataset}}/{{variant}}/figures"),
    params:
        sentences="0,1,2",  # the first three test sentences; the last layer (the default)
    log:
        f"{RESULTS}/logs/{{dataset}}/attention_figures_{{variant}}.log",
    shell:
        "{REPRODUCE} attention --checkpoint {input.checkpoint} --spm-model {input.spm_model}"
        " --source {input.source} --target {input.translations} --sentences {params.sentences}"
        " --out-dir {output} --results {RESULTS} --dataset {wildcards.dataset}"
        " --variant {wildcards.variant} > /dev/null 2> {log}"
