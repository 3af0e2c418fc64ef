"""Names of the files a variant's scores and an experiment's tables are written to, by experiment
task; the workflow's rules declare the same names (importing this module costs no pandas)."""

# A variant's dev and test scores summarised (rule summarize_variant).
SCORES_FILE = {"translation": "bleu.json", "parsing": "f1.json"}

# What `reproduce tables` writes into ``{results}/{dataset}/tables/``.
TABLE_FILES = {
    "translation": ["scores.md", "scores.html", "scores.csv",
                    "table2.md", "table2.html", "table2.csv", "table3.md", "table3.html",
                    "table3.csv", "bleu_vs_parameters.png", "dev_perplexity.png"],
    "parsing": ["scores.md", "scores.html", "scores.csv",
                "table4.md", "table4.html", "table4.csv", "dev_perplexity.png"],
}
