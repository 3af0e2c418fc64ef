"""Beam search on dev/test with the last or the averaged weights, then BLEU (or, for parsing,
labelled-bracket F1) and perplexity.

Table 3 reads dev with the last checkpoint (the paper: no averaging); Tables 2 and 4 read test
with the averaged one (Section 6.1). The wildcard `weights` (last|averaged) picks which.
"""


localrules:
    summarize_variant,  # merges two small JSON files


rule decode:
    input:
        checkpoint=weights_file,
        spm_model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        source=f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.src",
    output:
        f"{RESULTS}/{{dataset}}/{{variant}}/seed-{{seed}}/translations/{{evaluated_split}}.{{weights}}.txt",
    log:
        log_file("{dataset}/decode_{variant}_seed{seed}_{evaluated_split}_{weights}"),
    benchmark:
        benchmark_file("{dataset}/decode_{variant}_seed{seed}_{evaluated_split}_{weights}")
    conda:
        CONDA_ENV
    threads: config["training"].get("threads", 1)
    params:
        experiment=experiment_file,
        # an edited beam size or penalty replans decoding; the bound on a source line does
        # not: it changes no translation, it only refuses an input; nor does how often the
        # search reads which sentences are done (the same translations, bit for bit). Batch
        # sizes stay: they change float summation order, which may flip a near tie
        decoding=lambda wildcards: EXPERIMENTS[wildcards.dataset]
        .variant(wildcards.variant)
        .decoding.model_dump_json(exclude={"max_source_pieces", "check_every"}),
    shell:
        "python -m reproduce decode --experiment {params.experiment:q}"
        " --variant {wildcards.variant:q} --seed {wildcards.seed}"
        " --checkpoint {input.checkpoint:q}"
        " --spm-model {input.spm_model:q} --source {input.source:q} --out {output:q}"
        " --threads {threads} > {log:q} 2>&1"


rule score:
    input:
        translations=f"{RESULTS}/{{dataset}}/{{variant}}/seed-{{seed}}/translations/{{evaluated_split}}.{{weights}}.txt",
        reference=f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.ref",
        source=f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.src",
        checkpoint=weights_file,
        encoded=f"{RESULTS}/{{dataset}}/encoded/{{evaluated_split}}",
    output:
        f"{RESULTS}/{{dataset}}/{{variant}}/seed-{{seed}}/scores/{{evaluated_split}}.{{weights}}.json",
    log:
        log_file("{dataset}/score_{variant}_seed{seed}_{evaluated_split}_{weights}"),
    benchmark:
        benchmark_file("{dataset}/score_{variant}_seed{seed}_{evaluated_split}_{weights}")
    conda:
        CONDA_ENV
    threads: config["training"].get("threads", 1)
    params:
        experiment=experiment_file,
        results=tracking_root,
    shell:
        "python -m reproduce score --experiment {params.experiment:q}"
        " --variant {wildcards.variant:q} --seed {wildcards.seed}"
        " --split {wildcards.evaluated_split:q}"
        " --checkpoint-name {wildcards.weights:q} --translations {input.translations:q}"
        " --reference {input.reference:q} --source {input.source:q}"
        " --checkpoint {input.checkpoint:q}"
        " --encoded {input.encoded:q} --results {params.results:q} --out {output:q}"
        " --threads {threads} > {log:q} 2>&1"


# bleu.json for translation, f1.json for parsing (the wildcard scores_summary).
rule summarize_variant:
    input:
        unpack(variant_scores),
    output:
        report(
            f"{RESULTS}/{{dataset}}/{{variant}}/seed-{{seed}}/{{scores_summary}}.json",
            category="Scores per variant",
            subcategory="{dataset}",
            labels={"dataset": "{dataset}", "variant": "{variant}", "seed": "{seed}"},
        ),
    log:
        log_file("{dataset}/summarize_{variant}_seed{seed}_{scores_summary}"),
    conda:
        CONDA_ENV
    shell:
        "python -m reproduce summarize --dataset {wildcards.dataset:q}"
        " --variant {wildcards.variant:q} --seed {wildcards.seed}"
        " --dev {input.dev:q} --test {input.test:q}"
        " --out {output:q} > {log:q} 2>&1"
