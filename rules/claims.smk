# The papers' claims as an output (docs/methods.md, "Claims"): per model, one verdict for every claim, checkpoint
# (or trained-against-init pair) and sublayer kind, read from the tables the run already wrote; across models one
# table and the verdict grid of the report. Cheap (tables in, a table out): local rules on a cluster.


localrules:
    claims,
    claims_all,


rule claims:
    input:
        claims_inputs,
    output:
        report(
            "results/{model}/claims.tsv",
            caption="../report/claims_table.rst",
            category="Claims",
            subcategory="Tables",
            labels={"model": "{model}", "table": "claims"},
        ),
    log:
        "logs/claims/{model}.log",
    benchmark:
        "benchmarks/claims/{model}.tsv"
    conda:
        "../envs/plots.yaml"
    resources:
        mem_mb=figure_memory,
        runtime=figure_runtime,
    params:
        checkpoints=lambda wc: checkpoints(wc.model),
        nulls=lambda wc: null_checkpoints(wc.model),
        settings=lambda wc: job_settings("claims", wc.model),
    script:
        "../scripts/claims.py"


rule claims_all:
    input:
        expand("results/{model}/claims.tsv", model=MODELS),
    output:
        table="results/claims.tsv",
        png=report(
            "results/figures/claims.png",
            caption="../report/claims.rst",
            category="Claims",
            labels={"figure": "verdict grid"},
        ),
        pdf="results/figures/claims.pdf",
    log:
        "logs/claims_all/all.log",
    benchmark:
        "benchmarks/claims_all/all.tsv"
    conda:
        "../envs/plots.yaml"
    resources:
        mem_mb=figure_memory,
        runtime=figure_runtime,
    script:
        "../scripts/claims_all.py"


register_outputs(
    lambda: [f"results/{m}/claims.tsv" for m in MODELS]
    + ["results/claims.tsv", "results/figures/claims.png", "results/figures/claims.pdf"]
)
