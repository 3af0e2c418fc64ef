"""Table 1 (section 4): complexity per layer, analytic and measured on the machine that runs it
(FLOPs counted and wall time of one forward pass, n = 16..1024, d = 512). Not part of `all`:
ask for it, e.g. `snakemake --cores 1 table1`; it times layers, so run it on an idle machine."""


rule table1:
    output:
        markdown=report(f"{RESULTS}/table1/table1.md", category="Table 1"),
        csv=f"{RESULTS}/table1/table1.csv",
        plot=report(f"{RESULTS}/table1/table1.png", category="Table 1"),
    log:
        log_file("table1"),
    conda:
        CONDA_ENV
    threads: 1
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.markdown),
    shell:
        "python -m reproduce table1 --out-dir {params.out_dir:q} --threads {threads}"
        " > {log:q} 2>&1"
