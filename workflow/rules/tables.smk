"""Tables 2 and 3 (translation) or Table 4 (parsing) beside the paper's numbers, as markdown, CSV
and plots."""


localrules:
    final_tables,  # reads a few JSON files and renders small tables
    final_parsing_table,
    tables,


rule final_tables:
    input:
        # every file reproduce/tables/results.py reads: scores and training summaries
        scores=every_variant_scored,
        summaries=every_variant_trained,
    output:
        [reported_table_file(name) for name in TABLE_FILES["translation"]],
    log:
        log_file("{dataset}/final_tables"),
    wildcard_constraints:
        dataset=TRANSLATION_DATASETS,
    conda:
        CONDA_ENV
    params:
        experiment=experiment_file,
        results=tracking_root,
        out_dir=f"{RESULTS}/{{dataset}}/tables",
        stale=stale_trainings,
    shell:
        "python -m reproduce tables --experiment {params.experiment:q}"
        " --results {params.results:q} --out-dir {params.out_dir:q} > {log:q} 2>&1"


use rule final_tables as final_parsing_table with:
    output:
        [reported_table_file(name) for name in TABLE_FILES["parsing"]],
    log:
        log_file("{dataset}/final_parsing_table"),
    wildcard_constraints:
        dataset=PARSING_DATASETS,


# Renders whatever has finished, marking missing cells, into <dataset>/tables_so_far/; never
# triggers training, so what it reads are not inputs (they would be built) but a param that
# changes with them (snapshot_sources_state): asked for again, it renders again once they changed.
rule tables:
    output:
        snapshot_files(),
    log:
        log_file("tables"),
    conda:
        CONDA_ENV
    params:
        # already quoted argument by argument (shlex.join), hence no `:q` below
        render=render_tables_command(),
        sources_state=snapshot_sources_state,
    shell:
        "({params.render}) > {log:q} 2>&1"
