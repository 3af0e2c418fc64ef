"""Beam search on dev with the last weights and on test with the averaged ones, then BLEU (or,
for parsing, labelled-bracket F1) and perplexity: Table 3 reads dev with the last checkpoint (the
paper: no averaging); Tables 2 and 4 read test with the averaged one (Section 6.1).

One job per training evaluates both splits: a process of its own for each decoding and each
scoring spent more on starting (torch, MLflow, sacreBLEU's tokenizers: ~4 s) than on the tiny
demo's work. Another split or checkpoint: `python -m reproduce decode` and `score` by hand.
"""


localrules:
    summarize_variant,  # merges two small JSON files


DATA_DIR = f"{RESULTS}/{{dataset}}/data"


rule evaluate:
    input:
        unpack(
            made_by_data_steps(
                spm_model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
                dev_source=f"{DATA_DIR}/dev.src",
                dev_reference=f"{DATA_DIR}/dev.ref",
                dev_encoded=f"{RESULTS}/{{dataset}}/encoded/dev",
                test_source=f"{DATA_DIR}/test.src",
                test_reference=f"{DATA_DIR}/test.ref",
                test_encoded=f"{RESULTS}/{{dataset}}/encoded/test",
            )
        ),
        last=f"{SEED_DIR}/train/final.pt",
        averaged=f"{SEED_DIR}/averaged.pt",
    output:
        dev_translations=f"{SEED_DIR}/translations/dev.last.txt",
        dev_scores=f"{SEED_DIR}/{EVALUATED_SCORES['dev']}",
        test_translations=f"{SEED_DIR}/translations/test.averaged.txt",
        test_scores=f"{SEED_DIR}/{EVALUATED_SCORES['test']}",
    log:
        log_file("{dataset}/evaluate_{variant}_seed{seed}"),
    benchmark:
        benchmark_file("{dataset}/evaluate_{variant}_seed{seed}")
    conda:
        CONDA_ENV
    threads: config["training"].get("threads", 1)
    params:
        experiment=experiment_file,
        results=tracking_root,
        # an edited beam size or penalty replans decoding; the bound on a source line does
        # not: it changes no translation, it only refuses an input; nor does how often the
        # search reads which sentences are done (the same translations, bit for bit). Batch
        # sizes stay: they change float summation order, which may flip a near tie
        decoding=lambda wildcards: EXPERIMENTS[wildcards.dataset]
        .variant(wildcards.variant)
        .decoding.model_dump_json(exclude={"max_source_pieces", "check_every"}),
    shell:
        "python -m reproduce evaluate --experiment {params.experiment:q}"
        " --variant {wildcards.variant:q} --seed {wildcards.seed}"
        " --spm-model {input.spm_model:q} --results {params.results:q} --threads {threads}"
        " --split dev --checkpoint-name last --checkpoint {input.last:q}"
        " --source {input.dev_source:q} --reference {input.dev_reference:q}"
        " --encoded {input.dev_encoded:q} --translations {output.dev_translations:q}"
        " --out {output.dev_scores:q}"
        " --split test --checkpoint-name averaged --checkpoint {input.averaged:q}"
        " --source {input.test_source:q} --reference {input.test_reference:q}"
        " --encoded {input.test_encoded:q} --translations {output.test_translations:q}"
        " --out {output.test_scores:q} > {log:q} 2>&1"


# bleu.json for translation, f1.json for parsing (the wildcard scores_summary).
rule summarize_variant:
    input:
        unpack(variant_scores),
    output:
        report(
            f"{SEED_DIR}/{{scores_summary}}.json",
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
