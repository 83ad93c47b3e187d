from pathlib import Path

from layergeom import corpus, models
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    docs, meta = corpus.read_documents(sm.input.corpus)
    tok = models.load_tokenizer(Path(sm.input.tokenizer).parent)
    cfg = sm.params.settings["corpus"]
    seed = sm.params.settings["seed"]
    w = corpus.make_windows(docs, tok, cfg["n_windows"], cfg["window_tokens"], seed)
    corpus.save_windows(
        w,
        sm.output.windows,
        {
            "corpus": cfg["source"],
            "n_windows": cfg["n_windows"],
            "window_tokens": cfg["window_tokens"],
            "seed": seed,
            "n_documents": meta["n_documents"],
        },
    )
