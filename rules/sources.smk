# Model and corpus sources, tokenised windows, activation dumps and manifests.


localrules:
    manifest,
    checkpoint_table,


rule corpus:
    input:
        corpus_files(),
    output:
        "resources/corpus/corpus.jsonl",
    params:
        corpus=config["corpus"],
    log:
        "logs/corpus/corpus.log",
    benchmark:
        "benchmarks/corpus/corpus.tsv"
    conda:
        "../envs/torch.yaml"
    script:
        "../scripts/corpus.py"


rule train_tokenizer:
    input:
        "resources/corpus/corpus.jsonl",
    output:
        "resources/tokenizers/bpe{vocab}/tokenizer.json",
    params:
        vocab_size=lambda wc: int(wc.vocab),
    log:
        "logs/train_tokenizer/bpe{vocab}.log",
    benchmark:
        "benchmarks/train_tokenizer/bpe{vocab}.tsv"
    conda:
        "../envs/torch.yaml"
    script:
        "../scripts/train_tokenizer.py"


rule materialize:
    input:
        unpack(materialize_inputs),
    output:
        weights="resources/models/{model}/{checkpoint}/model.safetensors",
        config="resources/models/{model}/{checkpoint}/config.json",
        source="resources/models/{model}/{checkpoint}/source.json",
    params:
        model_cfg=lambda wc: materialize_cfg(wc.model, wc.checkpoint),
        out_dir=lambda wc: model_dir(wc.model, wc.checkpoint),
    log:
        "logs/materialize/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/materialize/{model}/{checkpoint}.tsv"
    conda:
        "../envs/torch.yaml"
    resources:
        mem_mb=4000,
    script:
        "../scripts/materialize.py"


rule checkpoint_table:
    input:
        lambda wc: [f"{model_dir(wc.model, c)}/source.json" for c in checkpoints(wc.model)],
    output:
        "results/{model}/checkpoints.tsv",
    log:
        "logs/checkpoint_table/{model}.log",
    benchmark:
        "benchmarks/checkpoint_table/{model}.tsv"
    conda:
        "../envs/torch.yaml"
    script:
        "../scripts/checkpoint_table.py"


rule windows:
    input:
        corpus="resources/corpus/corpus.jsonl",
        tokenizer=windows_tokenizer,
        tokenizer_files=tokenizer_files,
    output:
        windows="results/{model}/windows.npz",
        meta="results/{model}/windows.json",
    params:
        corpus=config["corpus"],
        seed=config["seed"],
    log:
        "logs/windows/{model}.log",
    benchmark:
        "benchmarks/windows/{model}.tsv"
    conda:
        "../envs/torch.yaml"
    script:
        "../scripts/windows.py"


rule activations:
    input:
        weights="resources/models/{model}/{checkpoint}/model.safetensors",
        windows="results/{model}/windows.npz",
    output:
        activations_output(),
    params:
        store=lambda wc: store_settings(wc.model),
        run=run_settings(),
    log:
        "logs/activations/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/activations/{model}/{checkpoint}.tsv"
    conda:
        "../envs/torch.yaml"
    threads: job_threads()
    resources:
        gpu=gpu_jobs(),
        mem_mb=4000,
    script:
        "../scripts/activations.py"


rule manifest:
    input:
        source="resources/models/{model}/{checkpoint}/source.json",
        windows_meta="results/{model}/windows.json",
        activations="results/{model}/{checkpoint}/activations",  # every store has a manifest, whatever it keeps
    output:
        "results/{model}/{checkpoint}/manifest.json",
    params:
        boundaries=lambda wc: boundaries(wc.model),
        seed=config["seed"],
    log:
        "logs/manifest/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/manifest/{model}/{checkpoint}.tsv"
    conda:
        "../envs/torch.yaml"
    script:
        "../scripts/manifest.py"


register_outputs(
    lambda: per_checkpoint("results/{model}/{checkpoint}/manifest.json")
    + [f"results/{m}/checkpoints.tsv" for m in MODELS]
)
