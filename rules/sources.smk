# Model and corpus sources, tokenised windows, activation dumps and manifests.


# Downloads run on the submitting host (login node), where the network is; compute-node jobs only read.
localrules:
    manifest,
    checkpoint_table,
    download,
    download_gguf,


rule corpus:
    input:
        corpus_files(),
    output:
        "resources/corpus/corpus.jsonl",
    log:
        "logs/corpus/corpus.log",
    benchmark:
        "benchmarks/corpus/corpus.tsv"
    conda:
        torch_env()
    params:
        settings=job_settings("corpus"),
    script:
        "../scripts/corpus.py"


rule train_tokenizer:
    input:
        "resources/corpus/corpus.jsonl",
    output:
        "resources/tokenizers/bpe{vocab}/tokenizer.json",
    log:
        "logs/train_tokenizer/bpe{vocab}.log",
    benchmark:
        "benchmarks/train_tokenizer/bpe{vocab}.tsv"
    conda:
        torch_env()
    params:
        vocab_size=lambda wc: int(wc.vocab),
    script:
        "../scripts/train_tokenizer.py"


rule download:
    output:
        directory("resources/hub/{model}/{checkpoint}"),
    log:
        "logs/download/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/download/{model}/{checkpoint}.tsv"
    conda:
        "../envs/hub.yaml"
    params:
        model_id=lambda wc: model_cfg(wc.model)["id"],
        revision=lambda wc: (
            model_cfg(wc.model)["checkpoints"][wc.checkpoint] or {}
        ).get("revision"),
        trust_remote_code=lambda wc: model_cfg(wc.model)["trust_remote_code"],
        family=lambda wc: model_cfg(wc.model)["family"],
        n_layers=lambda wc: model_cfg(wc.model)["n_layers"],
    script:
        "../scripts/download.py"


rule download_gguf:
    output:
        "resources/downloads/{gguf_file}",
    log:
        "logs/download_gguf/{gguf_file}.log",
    benchmark:
        "benchmarks/download_gguf/{gguf_file}.tsv"
    wildcard_constraints:
        gguf_file=r"[^/]+\.gguf",
    conda:
        torch_env()
    params:
        gguf=gguf_cfg,
    script:
        "../scripts/download_gguf.py"


rule materialize:
    input:
        unpack(materialize_inputs),
    output:
        weights="resources/models/{model}/{checkpoint}/model.safetensors",
        config="resources/models/{model}/{checkpoint}/config.json",
        source="resources/models/{model}/{checkpoint}/source.json",
    log:
        "logs/materialize/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/materialize/{model}/{checkpoint}.tsv"
    conda:
        torch_env()
    resources:
        mem_mb=materialize_memory,
    params:
        model_cfg=lambda wc: materialize_cfg(wc.model, wc.checkpoint),
        out_dir=lambda wc: model_dir(wc.model, wc.checkpoint),
    script:
        "../scripts/materialize.py"


rule checkpoint_table:
    input:
        lambda wc: [
            f"{model_dir(wc.model, c)}/source.json" for c in checkpoints(wc.model)
        ],
    output:
        "results/{model}/checkpoints.tsv",
    log:
        "logs/checkpoint_table/{model}.log",
    benchmark:
        "benchmarks/checkpoint_table/{model}.tsv"
    conda:
        torch_env()
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
    log:
        "logs/windows/{model}.log",
    benchmark:
        "benchmarks/windows/{model}.tsv"
    conda:
        torch_env()
    params:
        settings=job_settings("windows"),
    script:
        "../scripts/windows.py"


rule activations:
    input:
        weights="resources/models/{model}/{checkpoint}/model.safetensors",
        windows="results/{model}/windows.npz",
    output:
        activations_output(),
    log:
        "logs/activations/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/activations/{model}/{checkpoint}.tsv"
    conda:
        torch_env()
    threads: job_threads()
    resources:
        gpu=gpu_jobs(),
        mem_mb=activations_memory,
    params:
        settings=lambda wc: job_settings("activations", wc.model),
    script:
        "../scripts/activations.py"


rule manifest:
    input:
        source="resources/models/{model}/{checkpoint}/source.json",
        windows_meta="results/{model}/windows.json",
        activations="results/{model}/{checkpoint}/activations",  # every store has a manifest, whatever it keeps
    output:
        table_report(
            "results/{model}/{checkpoint}/manifest.json", "manifest", "Provenance"
        ),
    log:
        "logs/manifest/{model}/{checkpoint}.log",
    benchmark:
        "benchmarks/manifest/{model}/{checkpoint}.tsv"
    conda:
        torch_env()
    params:
        boundaries=lambda wc: boundaries(wc.model),
        settings=job_settings("manifest"),
    script:
        "../scripts/manifest.py"


register_outputs(
    lambda: per_checkpoint("results/{model}/{checkpoint}/manifest.json")
    + [f"results/{m}/checkpoints.tsv" for m in MODELS]
)
