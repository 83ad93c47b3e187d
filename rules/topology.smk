# Paper B topology (docs/methods.md §3): correlation graphs and signed Leiden communities per boundary,
# coupling of participation to Jacobian amplification per checkpoint, and the topology figures.
#
# One graph job per (model, checkpoint) writing every boundary's graph, like the Jacobian job: a graph costs
# ~1.2 s at d=576 and ~12 s at d=4096 on 2 cores (bench/results/topology.md) against ~2 s of start-up per
# job, so per-boundary jobs spent half of a small model's topology time starting Python (and flooded a
# SLURM queue with 60-second jobs for large ones). The outputs stay one file per boundary; the boundary
# list is known from the config, so each model gets its own rule with the exact list of outputs.
#
# spectra.boundaries_per_job smaller than the model's boundaries fans the graphs out like the spectra table:
# one rule per block of consecutive boundaries (topology_graph_<model>_block<k>, block k: boundaries[k·n:
# (k+1)·n]), each writing exactly its boundaries' files. The files are the same per-boundary outputs, so
# there is no gather; with one block the model keeps its one rule, unchanged (a finished run does not rerun).


localrules:
    coupling_significant_layers,


for _m in MODELS:
    _blocks = spectra_blocks(_m)
    for _k, _block in enumerate(_blocks):
        _fanned = len(_blocks) > 1
        _name = per_model_rule("topology_graph", _m) + (
            f"_block{_k}" if _fanned else ""
        )
        _tag = f"{{checkpoint}}/{_k}" if _fanned else "{checkpoint}"

        rule:
            name:
                _name
            input:
                activations=activations_for("topology", _m),
            output:
                nodes=topology_graphs(_m, "{checkpoint}", "tsv", _block),
                edges=topology_graphs(_m, "{checkpoint}", "edges.tsv", _block),
                sweep=topology_graphs(_m, "{checkpoint}", "sweep.tsv", _block),
            log:
                f"logs/topology_graph/{_m}/{_tag}.log",
            benchmark:
                f"benchmarks/topology_graph/{_m}/{_tag}.tsv"
            conda:
                graphs_torch_env()
            threads: job_threads()
            resources:
                gpu=analysis_gpus(_m),
                mem_mb=topology_graph_memory(_m),
                runtime=topology_graph_runtime(_m, len(_block)),
            params:
                **({"block": _k} if _fanned else {}),
                boundaries=_block,
                settings=job_settings("topology_graph", _m),
            script:
                "../scripts/topology_graph.py"


rule topology_coupling:
    input:
        graphs=lambda wc: topology_graphs(wc.model, wc.checkpoint, "tsv"),
        sweeps=lambda wc: topology_graphs(wc.model, wc.checkpoint, "sweep.tsv"),
        jacobians=lambda wc: spectra_jacobians(wc.model, wc.checkpoint, "npy"),
        spectra="results/{model}/{checkpoint}/spectra.tsv",  # Henrici departures, computed once there
    output:
        table=table_report("results/{model}/{checkpoint}/coupling.tsv", "coupling"),
        by_operator="results/{model}/{checkpoint}/coupling_by_operator.tsv",
        sweep="results/{model}/{checkpoint}/coupling_sweep.tsv",
    log:
        "logs/topology_coupling/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/topology_coupling/{model}/{checkpoint}.tsv"
    conda:
        "../envs/graphs.yaml"
    threads: job_threads()
    resources:
        mem_mb=coupling_memory,
        runtime=coupling_runtime,
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=lambda wc: job_settings("topology_coupling", wc.model),
    script:
        "../scripts/topology_coupling.py"


rule topology_graph_figure:
    input:
        nodes="results/{model}/{checkpoint}/graphs/{boundary}.tsv",
        edges="results/{model}/{checkpoint}/graphs/{boundary}.edges.tsv",
    output:
        png=report(
            "results/figures/topology_graph_{model}_{checkpoint}_{boundary}.png",
            caption="../report/topology_graph.rst",
            category="Paper B – topology",
            subcategory="{model}",
            labels={
                "model": "{model}",
                "checkpoint": "{checkpoint}",
                "boundary": "{boundary}",
                "figure": "graph",
            },
        ),
        pdf="results/figures/topology_graph_{model}_{checkpoint}_{boundary}.pdf",
    log:
        "logs/topology_graph_figure/{model}/{checkpoint}/{boundary}.log",
    benchmark:
        "benchmarks/topology_graph_figure/{model}/{checkpoint}/{boundary}.tsv"
    conda:
        "../envs/graphs.yaml"
    resources:
        mem_mb=figure_memory,
        runtime=figure_runtime,
    params:
        label=lambda wc: model_cfg(wc.model).get("label", wc.model),
        settings=job_settings("topology_graph_figure"),
    script:
        "../scripts/topology_graph_figure.py"


rule topology_coupling_figure:
    input:
        lambda wc: [
            f"results/{wc.model}/{c}/coupling.tsv" for c in checkpoints(wc.model)
        ],
    output:
        png=report(
            "results/figures/coupling_rho_{model}.png",
            caption="../report/topology_coupling.rst",
            category="Paper B – topology",
            subcategory="{model}",
            labels={"model": "{model}", "figure": "coupling ρ vs layer"},
        ),
        pdf="results/figures/coupling_rho_{model}.pdf",
    log:
        "logs/topology_coupling_figure/{model}.log",
    benchmark:
        "benchmarks/topology_coupling_figure/{model}.tsv"
    conda:
        "../envs/graphs.yaml"
    resources:
        mem_mb=figure_memory,
        runtime=figure_runtime,
    params:
        checkpoints=lambda wc: checkpoints(wc.model),
        label=lambda wc: model_cfg(wc.model).get("label", wc.model),
    script:
        "../scripts/topology_coupling_figure.py"


rule coupling_significant_layers:
    input:
        per_checkpoint("results/{model}/{checkpoint}/coupling.tsv"),
    output:
        table="results/figures/coupling_significant_layers.tsv",
        png=report(
            "results/figures/coupling_significant_layers.png",
            caption="../report/topology_significant.rst",
            category="Paper B – topology",
            labels={"figure": "FDR-significant layers per checkpoint"},
        ),
        pdf="results/figures/coupling_significant_layers.pdf",
    log:
        "logs/coupling_significant_layers/all.log",
    benchmark:
        "benchmarks/coupling_significant_layers/all.tsv"
    conda:
        "../envs/graphs.yaml"
    resources:
        mem_mb=figure_memory,
        runtime=figure_runtime,
    params:
        runs=[[m, c] for m in MODELS for c in checkpoints(m)],
    script:
        "../scripts/topology_significant.py"


# the community figure shows topology.figure_boundary, or the middle boundary in depth order
register_outputs(
    lambda: per_checkpoint("results/{model}/{checkpoint}/coupling.tsv")
    + [
        f"results/figures/topology_graph_{m}_{c}_{b}.{ext}"
        for m in MODELS
        for b in [
            section(m, "topology")["figure_boundary"]
            or boundaries(m)[len(boundaries(m)) // 2]
        ]
        for c in checkpoints(m)
        for ext in ("png", "pdf")
    ]
    + [
        f"results/figures/coupling_rho_{m}.{ext}"
        for m in MODELS
        for ext in ("png", "pdf")
    ]
    + [
        f"results/figures/coupling_significant_layers.{ext}"
        for ext in ("tsv", "png", "pdf")
    ]
)
