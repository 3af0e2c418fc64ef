"""Beam search on dev/test with the last or the averaged checkpoint, then BLEU and perplexity.

Table 3 reads dev with the last checkpoint (the paper: no averaging); Table 2 reads test with
the averaged one.
"""


def checkpoint_file(wildcards):
    folder = variant_dir(wildcards.dataset, wildcards.variant)
    if wildcards.checkpoint == "last":
        return f"{folder}/train/final.pt"
    return f"{folder}/averaged.pt"


rule decode:
    input:
        checkpoint=checkpoint_file,
        spm_model=f"{RESULTS}/{{dataset}}/bpe/spm.model",
        source=f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.src",
    output:
        f"{RESULTS}/{{dataset}}/{{variant}}/translations/{{evaluated_split}}.{{checkpoint}}.txt",
    params:
        experiment=experiment_file,
    threads: config["training"].get("threads", 1)
    log:
        f"{RESULTS}/logs/{{dataset}}/decode_{{variant}}_{{evaluated_split}}_{{checkpoint}}.log",
    shell:
        "{REPRODUCE} decode --experiment {params.experiment} --variant {wildcards.variant}"
        " --checkpoint {input.checkpoint} --spm-model {input.spm_model} --source {input.source}"
        " --out {output} --threads {threads} 2> {log}"


rule score:
    input:
        translations=f"{RESULTS}/{{dataset}}/{{variant}}/translations/{{evaluated_split}}.{{checkpoint}}.txt",
        reference=f"{RESULTS}/{{dataset}}/data/{{evaluated_split}}.ref",
        checkpoint=checkpoint_file,
        encoded=f"{RESULTS}/{{dataset}}/encoded/{{evaluated_split}}",
    output:
        f"{RESULTS}/{{dataset}}/{{variant}}/scores/{{evaluated_split}}.{{checkpoint}}.json",
    params:
        experiment=experiment_file,
    threads: config["training"].get("threads", 1)
    log:
        f"{RESULTS}/logs/{{dataset}}/score_{{variant}}_{{evaluated_split}}_{{checkpoint}}.log",
    shell:
        "{REPRODUCE} score --experiment {params.experiment} --variant {wildcards.variant}"
        " --split {wildcards.evaluated_split} --checkpoint-name {wildcards.checkpoint}"
        " --translations {input.translations} --reference {input.reference}"
        " --checkpoint {input.checkpoint} --encoded {input.encoded} --results {RESULTS}"
        " --out {output} --threads {threads} 2> {log}"


rule summarize_variant:
    input:
        dev=f"{RESULTS}/{{dataset}}/{{variant}}/scores/dev.last.json",
        test=f"{RESULTS}/{{dataset}}/{{variant}}/scores/test.averaged.json",
    output:
        f"{RESULTS}/{{dataset}}/{{variant}}/bleu.json",
    shell:
        "{REPRODUCE} summarize --dataset {wildcards.dataset} --variant {wildcards.variant}"
        " --dev {input.dev} --test {input.test} --out {output}"
