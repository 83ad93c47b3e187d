# Models trained here (source: train): one training job per model, log-spaced checkpoints, loss curves,
# and the training-dynamics figure that follows every analysis along the training steps.


rule train_model:
    input:
        corpus="resources/corpus/corpus.jsonl",
        tokenizer=train_tokenizer_input,
    output:
        checkpoints=directory("resources/train/{model}"),
        curves="results/{model}/training.tsv",
    log:
        "logs/train_model/{model}.log",
    benchmark:
        "benchmarks/train_model/{model}.tsv"
    conda:
        torch_env()
    threads: lambda wc: section(wc.model, "train")["threads"]
    resources:
        gpu=gpu_jobs(),
        mem_mb=by_attempt(4000),
    params:
        family=lambda wc: model_cfg(wc.model)["family"],
        hf_config=lambda wc: model_cfg(wc.model)["hf_config"],
        settings=lambda wc: job_settings("train_model", wc.model),
    script:
        "../scripts/train_model.py"


rule training_figure:
    input:
        curves="results/{model}/training.tsv",
        manifests=lambda wc: [
            f"results/{wc.model}/{c}/manifest.json" for c in checkpoints(wc.model)
        ],
        tables=lambda wc: training_tables(wc.model),
    output:
        png=report(
            "results/figures/training_dynamics_{model}.png",
            caption="../report/training_dynamics.rst",
            category="Training dynamics",
            labels={"model": "{model}", "figure": "dynamics vs step"},
        ),
        pdf="results/figures/training_dynamics_{model}.pdf",
        tsv="results/{model}/training_dynamics.tsv",
    log:
        "logs/training_figure/{model}.log",
    benchmark:
        "benchmarks/training_figure/{model}.tsv"
    conda:
        "../envs/plots.yaml"
    params:
        results=lambda wc: f"results/{wc.model}",
        checkpoints=lambda wc: checkpoints(wc.model),
    script:
        "../scripts/training_figure.py"


register_outputs(
    lambda: [f"results/figures/training_dynamics_{m}.png" for m in trained_models()]
    + [f"results/figures/training_dynamics_{m}.pdf" for m in trained_models()]
)
