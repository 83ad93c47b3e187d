# Paper B spectral geometry (docs/methods.md §2): exact sublayer Jacobians, their spectra, the cumulative
# operator through depth and the Schur surgery, per model and checkpoint; figures per model.


# ---- Jacobians: one job per (model, checkpoint) writing every boundary's J̄_b ----------------------
# Loading the weights and importing torch costs seconds per job (minutes per job for multi-GB models
# on a GPU node), while the outputs must stay one file per boundary (the topology stage reads
# jacobians/{boundary}.npy). The boundary list is known from the config, so each model gets its own
# rule with the exact list of outputs; checkpoints remain the wildcard that fans out.
# The job is resumable: finished boundaries wait in jacobians/.partial/ (not an output, so Snakemake
# keeps it when it deletes a failed job's outputs) and a rerun with the same inputs and settings reuses them.

for _m in MODELS:

    rule:
        name:
            per_model_rule("spectra_jacobians", _m)
        input:
            weights=f"resources/models/{_m}/{{checkpoint}}/model.safetensors",
            activations=activations_for("spectra", _m),
        output:
            npy=spectra_jacobians(_m, "{checkpoint}", "npy"),
            groups=spectra_jacobians(_m, "{checkpoint}", "groups.npy"),
            json=spectra_jacobians(_m, "{checkpoint}", "json"),
            tsv=spectra_jacobians(_m, "{checkpoint}", "tsv"),
        log:
            f"logs/spectra_jacobians/{_m}/{{checkpoint}}.log",
        benchmark:
            f"benchmarks/spectra_jacobians/{_m}/{{checkpoint}}.tsv"
        conda:
            torch_env()
        threads: job_threads()
        resources:
            gpu=gpu_jobs(),
            mem_mb=jacobians_memory(_m),
        params:
            boundaries=boundaries(_m),
            settings=job_settings("spectra_jacobians", _m),
        script:
            "../scripts/spectra_jacobians.py"


# ---- tables ---------------------------------------------------------------------------------------
# spectra.tsv and eigenvalues.tsv: one job per checkpoint, or (spectra.boundaries_per_job smaller than the
# model's boundaries) a part job per block of consecutive boundaries and a gather; the model constraints make
# exactly one of the two routes write a model's tables.
rule spectra_table:
    input:
        unpack(spectra_inputs),
    output:
        table=table_report("results/{model}/{checkpoint}/spectra.tsv", "spectra"),
        eigenvalues="results/{model}/{checkpoint}/eigenvalues.tsv",
    log:
        "logs/spectra_table/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_table/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models(False)),
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=spectra_memory("spectra_table"),
        runtime=spectra_runtime("spectra_table"),
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=lambda wc: job_settings("spectra_table", wc.model),
    script:
        "../scripts/spectra_table.py"


# One block's rows and eigenvalues as computed (lossless; the gather writes the TSVs), in a part file of arrays
# and JSON with the inputs and settings it was computed from (layergeom.parts). Not temp(): the parts hold about
# 50·d bytes per boundary (13 MB per checkpoint at d = 4096), and a re-gather then costs seconds instead of the
# blocks' hours (a part is remade only when its own inputs, params or code change). `siblings`: every block's
# part, so that a part job removes the work a killed job of other blocks left in parts/spectra/.partial/.
rule spectra_table_part:
    input:
        unpack(spectra_part_inputs),
    output:
        "results/{model}/{checkpoint}/parts/spectra/{block}.npz",
    log:
        "logs/spectra_table_part/{model}/{checkpoint}/{block}.log",
    benchmark:
        "benchmarks/spectra_table_part/{model}/{checkpoint}/{block}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
        block=r"\d+",
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=spectra_memory("spectra_table"),
        runtime=spectra_runtime("spectra_table"),
    params:
        boundaries=spectra_block,
        siblings=spectra_parts,
        settings=lambda wc: job_settings("spectra_table_part", wc.model),
    script:
        "../scripts/spectra_table_part.py"


# The gather reads the Jacobian files' identities too: each part must have been computed from them as they are.
rule spectra_table_gather:
    input:
        unpack(lambda wc: {"parts": spectra_parts(wc), **spectra_inputs(wc)}),
    output:
        table=table_report("results/{model}/{checkpoint}/spectra.tsv", "spectra"),
        eigenvalues="results/{model}/{checkpoint}/eigenvalues.tsv",
    log:
        "logs/spectra_table_gather/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_table_gather/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
    conda:
        torch_env()
    resources:
        mem_mb=gather_memory,
        runtime=gather_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=lambda wc: job_settings("spectra_table_gather", wc.model),
    script:
        "../scripts/spectra_table_gather.py"


# cumulative.tsv: one job per checkpoint, or (spectra.boundaries_per_job, as the table) a job per variant's
# chain through every boundary and a gather (docs/cluster.md).
rule spectra_cumulative:
    input:
        unpack(spectra_inputs),
    output:
        table_report("results/{model}/{checkpoint}/cumulative.tsv", "cumulative"),
    log:
        "logs/spectra_cumulative/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_cumulative/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models(False)),
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=spectra_memory("spectra_cumulative"),
        runtime=spectra_runtime("spectra_cumulative"),
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=lambda wc: job_settings("spectra_cumulative", wc.model),
    script:
        "../scripts/spectra_cumulative.py"


# One variant's rows (a part file as computed, kept: small), resumable from its own snapshot.
rule spectra_cumulative_variant:
    input:
        unpack(spectra_inputs),
    output:
        "results/{model}/{checkpoint}/parts/cumulative/{variant}.npz",
    log:
        "logs/spectra_cumulative_variant/{model}/{checkpoint}/{variant}.log",
    benchmark:
        "benchmarks/spectra_cumulative_variant/{model}/{checkpoint}/{variant}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
        variant="|".join(CUMULATIVE_VARIANTS),
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=cumulative_variant_memory,
        runtime=cumulative_variant_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        siblings=cumulative_parts,
        settings=lambda wc: job_settings("spectra_cumulative_variant", wc.model),
    script:
        "../scripts/spectra_cumulative_variant.py"


rule spectra_cumulative_gather:
    input:
        unpack(lambda wc: {"parts": cumulative_parts(wc), **spectra_inputs(wc)}),
    output:
        table_report("results/{model}/{checkpoint}/cumulative.tsv", "cumulative"),
    log:
        "logs/spectra_cumulative_gather/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_cumulative_gather/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
    conda:
        torch_env()
    resources:
        mem_mb=gather_memory,
        runtime=gather_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        variants=list(CUMULATIVE_VARIANTS),
        settings=lambda wc: job_settings("spectra_cumulative_gather", wc.model),
    script:
        "../scripts/spectra_cumulative_gather.py"


# schur.tsv: one job per checkpoint, or (spectra.boundaries_per_job, as the table) a prep job per block of
# boundaries, a job per product chain through every boundary (or per segment of one: spectra.chain_segments)
# and a gather (docs/cluster.md). Its rows at α = 1 with the own N are J̄'s products: cumulative.tsv's rows.
rule spectra_schur:
    input:
        unpack(schur_inputs),
    output:
        table_report("results/{model}/{checkpoint}/schur.tsv", "schur"),
    log:
        "logs/spectra_schur/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_schur/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models(False)),
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=spectra_memory("spectra_schur"),
        runtime=spectra_runtime("spectra_schur"),
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=lambda wc: job_settings("spectra_schur", wc.model),
    script:
        "../scripts/spectra_schur.py"


# A block's Schur forms, order eigenvectors and tangents (.npz, temp(): d² complex numbers per array, 268 MB each
# at d = 4096; the chains read them, a re-gather does not) and its records (the b_* metrics, kept: small).
rule spectra_schur_prep:
    input:
        unpack(spectra_part_inputs),
    output:
        part="results/{model}/{checkpoint}/parts/schur/prep/{block}.npz",
        arrays=temp("results/{model}/{checkpoint}/parts/schur/prep/{block}.arrays.npz"),
    log:
        "logs/spectra_schur_prep/{model}/{checkpoint}/{block}.log",
    benchmark:
        "benchmarks/spectra_schur_prep/{model}/{checkpoint}/{block}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
        block=r"\d+",
    priority: schur_prep_priority  # above every chain job: they wait on every prep
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=spectra_memory("spectra_schur_prep"),
        runtime=spectra_runtime("spectra_schur_prep"),
    params:
        boundaries=spectra_block,
        first=spectra_block_first,
        siblings=schur_prep_parts,
        settings=lambda wc: job_settings("spectra_schur_prep", wc.model),
    script:
        "../scripts/spectra_schur_prep.py"


# One product chain (settings.schur_chains: an operator's J(α), one variant each, or a random order's at the
# α of spectra.schur_order_alphas, both variants from one reordering) through every boundary in depth order; its erank per depth (kept: small), resumable from its own snapshot.
# With spectra.chain_segments S > 1, up to S jobs per chain ({chain}.s{k}; S for the costliest chains, fewer in
# proportion for cheaper ones: resources.schur_jobs.schur_chain_segments): each advances the products through the depths
# before its segment (no SVD), then steps through its own depths.
rule spectra_schur_chain:
    input:
        unpack(schur_chain_inputs),
    output:
        "results/{model}/{checkpoint}/parts/schur/chains/{chain}.npz",
    log:
        "logs/spectra_schur_chain/{model}/{checkpoint}/{chain}.log",
    benchmark:
        "benchmarks/spectra_schur_chain/{model}/{checkpoint}/{chain}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
        chain=r"(?:[a-z]+_(?:none|random)_a[0-9.e+-]+|order\d+)(?:\.s\d+)?",
    priority: schur_chain_priority  # the longest chain jobs first (more of them than free slots: some wait)
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=schur_chain_memory,
        runtime=schur_chain_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        blocks=lambda wc: spectra_blocks(wc.model),
        chain=lambda wc: schur_chain_name(schur_chain_of(wc)),
        segment=schur_chain_segment,
        siblings=schur_chain_parts,
        settings=lambda wc: job_settings("spectra_schur_chain", wc.model),
    script:
        "../scripts/spectra_schur_chain.py"


rule spectra_schur_gather:
    input:
        unpack(
            lambda wc: {
                "preps": schur_prep_parts(wc),
                "chains": schur_chain_parts(wc),
                "cumulative": f"results/{wc.model}/{wc.checkpoint}/cumulative.tsv",
                **spectra_inputs(wc),
            }
        ),
    output:
        table_report("results/{model}/{checkpoint}/schur.tsv", "schur"),
    log:
        "logs/spectra_schur_gather/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_schur_gather/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
    conda:
        torch_env()
    resources:
        mem_mb=gather_memory,
        runtime=gather_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        segments=schur_chain_segment_counts,
        settings=lambda wc: job_settings("spectra_schur_gather", wc.model),
    script:
        "../scripts/spectra_schur_gather.py"


# Headline metrics on nested subsets of the samples (the first S of the G sample groups): one job per
# checkpoint, or (spectra.boundaries_per_job) a job per subset size and a gather (docs/cluster.md).
rule spectra_convergence:
    input:
        unpack(spectra_inputs),
    output:
        "results/{model}/{checkpoint}/convergence.tsv",
    log:
        "logs/spectra_convergence/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_convergence/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models(False)),
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=spectra_memory("spectra_convergence"),
        runtime=spectra_runtime("spectra_convergence"),
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=lambda wc: job_settings("spectra_convergence", wc.model),
    script:
        "../scripts/spectra_convergence.py"


# One subset size's rows: the subset-th size of the Jacobian job's G groups (the sizes need G, so the jobs are
# indexed: as many as spectra.n_groups allows; an index past the actual sizes writes no rows). Kept: small.
rule spectra_convergence_subset:
    input:
        unpack(spectra_inputs),
    output:
        "results/{model}/{checkpoint}/parts/convergence/{subset}.npz",
    log:
        "logs/spectra_convergence_subset/{model}/{checkpoint}/{subset}.log",
    benchmark:
        "benchmarks/spectra_convergence_subset/{model}/{checkpoint}/{subset}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
        subset=r"\d+",
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=analysis_gpus(),
        mem_mb=convergence_subset_memory,
        runtime=convergence_subset_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        subset=convergence_subset,
        siblings=convergence_parts,
        settings=lambda wc: job_settings("spectra_convergence_subset", wc.model),
    script:
        "../scripts/spectra_convergence_subset.py"


rule spectra_convergence_gather:
    input:
        unpack(lambda wc: {"parts": convergence_parts(wc), **spectra_inputs(wc)}),
    output:
        "results/{model}/{checkpoint}/convergence.tsv",
    log:
        "logs/spectra_convergence_gather/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_convergence_gather/{model}/{checkpoint}.tsv"
    wildcard_constraints:
        model=model_pattern(fanned_models()),
    conda:
        torch_env()
    resources:
        mem_mb=gather_memory,
        runtime=gather_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=lambda wc: job_settings("spectra_convergence_gather", wc.model),
    script:
        "../scripts/spectra_convergence_gather.py"


# Per-kind depth trends of the spectra.tsv metrics: thirds' means and the slope over relative depth.
rule spectra_trends:
    input:
        "results/{model}/{checkpoint}/spectra.tsv",
    output:
        "results/{model}/{checkpoint}/trends.tsv",
    log:
        "logs/spectra_trends/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/spectra_trends/{model}/{checkpoint}.tsv"
    conda:
        "../envs/plots.yaml"
    resources:
        mem_mb=figure_memory,
        runtime=figure_runtime,
    params:
        settings=lambda wc: job_settings("spectra_trends", wc.model),
    script:
        "../scripts/spectra_trends.py"


# ---- figures (one per model, every checkpoint in it) ----------------------------------------------
# figure -> (its tables, read per checkpoint in config order; title). The gradient reads the per-boundary
# metrics and their per-kind trends.
SPECTRA_FIGURES = {
    "eigenvalues": ("eigenvalues.tsv", "Eigenvalues of J̄_b in the complex plane"),
    "gradient": (("spectra.tsv", "trends.tsv"), "Spectral gradient through depth"),
    "cumulative": ("cumulative.tsv", "Cumulative effective rank"),
    "schur": ("schur.tsv", "Schur surgery"),
    "convergence": ("convergence.tsv", "Convergence with the number of samples"),
}


# Snakemake does not expand wildcards in caption paths, so each figure gets its own rule and caption.
for _fig, (_table, _title) in SPECTRA_FIGURES.items():

    rule:
        name:
            f"spectra_figure_{_fig}"
        input:
            lambda wc, table=_table: [
                f"results/{wc.model}/{c}/{t}"
                for t in ([table] if isinstance(table, str) else table)
                for c in checkpoints(wc.model)
            ],
        output:
            png=report(
                f"results/figures/spectra_{_fig}_{{model}}.png",
                caption=f"../report/spectra_{_fig}.rst",
                category="Paper B – spectral geometry",
                subcategory=_title,
                labels=lambda wc, fig=_fig: {"model": wc.model, "figure": fig},
            ),
            pdf=f"results/figures/spectra_{_fig}_{{model}}.pdf",
        log:
            f"logs/spectra_figure_{_fig}/{{model}}.log",
        benchmark:
            f"benchmarks/spectra_figure_{_fig}/{{model}}.tsv"
        conda:
            "../envs/plots.yaml"
        resources:
            mem_mb=figure_memory,
            runtime=figure_runtime,
        params:
            figure=_fig,
            settings=lambda wc, fig=_fig: spectra_figure_settings(fig, wc.model),
        script:
            "../scripts/spectra_figure.py"


register_outputs(
    lambda: per_checkpoint("results/{model}/{checkpoint}/spectra.tsv")
    + per_checkpoint("results/{model}/{checkpoint}/cumulative.tsv")
    + per_checkpoint("results/{model}/{checkpoint}/schur.tsv")
    + per_checkpoint("results/{model}/{checkpoint}/convergence.tsv")
    + per_checkpoint("results/{model}/{checkpoint}/trends.tsv")
    + [
        f"results/figures/spectra_{f}_{m}.{ext}"
        for m in MODELS
        for f in SPECTRA_FIGURES
        for ext in ("png", "pdf")
    ]
)
