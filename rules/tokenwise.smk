# Paper A tokenwise decomposition (docs/methods.md §1): per block transition, neighbourhood fits of six map
# classes and the per-anchor geometry; per checkpoint, the functional KL of every patch (one clean pass
# per window serves all layers) and the summary table with Spearman rho(RelErr, KL); the Paper A figures.


rule tokenwise_fit:
    input:
        activations=activations_for("tokenwise"),
    output:
        table="results/{model}/{checkpoint}/tokenwise/L{layer}.tsv",
        patches=temp("results/{model}/{checkpoint}/tokenwise/L{layer}.patches.npz"),
    log:
        "logs/tokenwise_fit/{model}/{checkpoint}/L{layer}.log",
    benchmark:
        "benchmarks/tokenwise_fit/{model}/{checkpoint}/L{layer}.tsv"
    priority: 1  # the longest chain (fits -> KL -> summary): start it first
    # one cluster job runs every layer's fit of a (model, checkpoint), one after the other on one GPU: with
    # `group-components` in the SLURM profile (a fit takes seconds; one allocation each would mostly queue)
    group:
        "tokenwise_fit_{model}_{checkpoint}"
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=gpu_jobs(),
        mem_mb=tokenwise_fit_memory,
        runtime=by_attempt(5),  # minutes per layer; the group job asks for the sum over its layers
    params:
        settings=lambda wc: job_settings("tokenwise_fit", wc.model),
    script:
        "../scripts/tokenwise_fit.py"


rule tokenwise_kl:
    input:
        weights="resources/models/{model}/{checkpoint}/model.safetensors",
        activations=activations_for("tokenwise"),
        patches=lambda wc: tokenwise_layer_files(wc, "patches.npz"),
    output:
        "results/{model}/{checkpoint}/tokenwise/kl.tsv",
    log:
        "logs/tokenwise_kl/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/tokenwise_kl/{model}/{checkpoint}.tsv"
    priority: 1  # the longest chain (fits -> KL -> summary): start it first
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=gpu_jobs(),
        mem_mb=tokenwise_kl_memory,
    params:
        settings=lambda wc: job_settings("tokenwise_kl", wc.model),
    script:
        "../scripts/tokenwise_kl.py"


rule tokenwise_summary:
    input:
        tables=lambda wc: tokenwise_layer_files(wc, "tsv"),
        kl="results/{model}/{checkpoint}/tokenwise/kl.tsv",
    output:
        summary=table_report("results/{model}/{checkpoint}/tokenwise.tsv", "tokenwise"),
        anchors="results/{model}/{checkpoint}/tokenwise/anchors.tsv",
        pooled="results/{model}/{checkpoint}/tokenwise/pooled.tsv",
    log:
        "logs/tokenwise_summary/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/tokenwise_summary/{model}/{checkpoint}.tsv"
    conda:
        "../envs/plots.yaml"
    params:
        settings=lambda wc: job_settings("tokenwise_summary", wc.model),
    script:
        "../scripts/tokenwise_summary.py"


TOKENWISE_FIGURES = {
    "geometry": "alignment, angle and projection per layer",
    "relerr": "RelErr per class and layer",
    "relerr_kl": "RelErr vs KL",
    "rho": "Spearman rho heat-map",
    "energy_rank": "energy captured vs rank",
}


rule tokenwise_figures:
    input:
        summaries=per_checkpoint("results/{model}/{checkpoint}/tokenwise.tsv"),
        anchors=per_checkpoint("results/{model}/{checkpoint}/tokenwise/anchors.tsv"),
        pooled=per_checkpoint("results/{model}/{checkpoint}/tokenwise/pooled.tsv"),
    output:
        geometry=report(
            "results/figures/tokenwise_geometry.png",
            caption="../report/tokenwise_geometry.rst",
            category="Paper A – tokenwise decomposition",
            labels={"figure": TOKENWISE_FIGURES["geometry"]},
        ),
        geometry_pdf="results/figures/tokenwise_geometry.pdf",
        relerr=report(
            "results/figures/tokenwise_relerr.png",
            caption="../report/tokenwise_relerr.rst",
            category="Paper A – tokenwise decomposition",
            labels={"figure": TOKENWISE_FIGURES["relerr"]},
        ),
        relerr_pdf="results/figures/tokenwise_relerr.pdf",
        relerr_kl=report(
            "results/figures/tokenwise_relerr_kl.png",
            caption="../report/tokenwise_relerr_kl.rst",
            category="Paper A – tokenwise decomposition",
            labels={"figure": TOKENWISE_FIGURES["relerr_kl"]},
        ),
        relerr_kl_pdf="results/figures/tokenwise_relerr_kl.pdf",
        rho=report(
            "results/figures/tokenwise_rho.png",
            caption="../report/tokenwise_rho.rst",
            category="Paper A – tokenwise decomposition",
            labels={"figure": TOKENWISE_FIGURES["rho"]},
        ),
        rho_pdf="results/figures/tokenwise_rho.pdf",
        energy_rank=report(
            "results/figures/tokenwise_energy_rank.png",
            caption="../report/tokenwise_energy_rank.rst",
            category="Paper A – tokenwise decomposition",
            labels={"figure": TOKENWISE_FIGURES["energy_rank"]},
        ),
        energy_rank_pdf="results/figures/tokenwise_energy_rank.pdf",
    log:
        "logs/tokenwise_figures/all.log",
    benchmark:
        "benchmarks/tokenwise_figures/all.tsv"
    conda:
        "../envs/plots.yaml"
    params:
        runs=tokenwise_runs(),
        labels={m: model_cfg(m).get("label", m) for m in MODELS},
        settings={m: job_settings("tokenwise_figures", m) for m in MODELS},
    script:
        "../scripts/tokenwise_figures.py"


register_outputs(
    lambda: per_checkpoint("results/{model}/{checkpoint}/tokenwise.tsv")
    + per_checkpoint("results/{model}/{checkpoint}/tokenwise/pooled.tsv")
    + [
        f"results/figures/tokenwise_{f}.{ext}"
        for f in TOKENWISE_FIGURES
        for ext in ("png", "pdf")
    ]
)


# ---- convergence of rho(RelErr, KL) and the residual angle with the anchors and windows ---------------
rule tokenwise_convergence:
    input:
        anchors="results/{model}/{checkpoint}/tokenwise/anchors.tsv",
        tables=lambda wc: tokenwise_layer_files(wc, "tsv"),
    output:
        "results/{model}/{checkpoint}/tokenwise_convergence.tsv",
    log:
        "logs/tokenwise_convergence/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/tokenwise_convergence/{model}/{checkpoint}.tsv"
    conda:
        "../envs/plots.yaml"
    params:
        settings=lambda wc: job_settings("tokenwise_convergence", wc.model),
    script:
        "../scripts/tokenwise_convergence.py"


rule tokenwise_convergence_figure:
    input:
        lambda wc: [
            f"results/{wc.model}/{c}/tokenwise_convergence.tsv"
            for c in checkpoints(wc.model)
        ],
    output:
        png=report(
            "results/figures/tokenwise_convergence_{model}.png",
            caption="../report/tokenwise_convergence.rst",
            category="Paper A – tokenwise decomposition",
            labels=lambda wc: {
                "model": wc.model,
                "figure": "convergence with anchors and windows",
            },
        ),
        pdf="results/figures/tokenwise_convergence_{model}.pdf",
    log:
        "logs/tokenwise_convergence_figure/{model}.log",
    benchmark:
        "benchmarks/tokenwise_convergence_figure/{model}.tsv"
    conda:
        "../envs/plots.yaml"
    params:
        checkpoints=lambda wc: checkpoints(wc.model),
        label=lambda wc: model_cfg(wc.model).get("label", wc.model),
    script:
        "../scripts/tokenwise_convergence_figure.py"


register_outputs(
    lambda: per_checkpoint("results/{model}/{checkpoint}/tokenwise_convergence.tsv")
    + [
        f"results/figures/tokenwise_convergence_{m}.{ext}"
        for m in MODELS
        for ext in ("png", "pdf")
    ]
)
