"""Table 1 (section 4): complexity per layer, analytic and measured on the machine that runs it
(FLOPs counted and wall time of one forward pass, n = 16..1024, d = 512). Not part of `all`:
ask for it, e.g. `snakemake --cores 1 table1`; it times layers, so run it on an idle machine."""


rule table1:
    output:
        markdown=f"{RESULTS}/table1/table1.md",
        csv=f"{RESULTS}/table1/table1.csv",
        plot=f"{RESULTS}/table1/table1.png",
    threads: 1
    log:
        f"{RESULTS}/logs/table1.log",
    shell:
        "{REPRODUCE} table1 --out-dir {RESULTS}/table1 --threads {threads} > /dev/null 2> {log}"
