import shutil
from pathlib import Path

from layergeom import corpus, models, train
from layergeom.runtime import resolve_device
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.train["seed"], threads=sm.params.train["threads"]):
    docs, _ = corpus.read_documents(sm.input.corpus)
    tok = models.load_tokenizer(Path(sm.input.tokenizer).parent)
    windows = corpus.make_windows(docs, tok, None, sm.params.window_tokens, sm.params.train["seed"])["tokens"]
    out = Path(sm.output.checkpoints)
    dev = resolve_device(sm.params.run["device"])
    train.train(sm.params.family, sm.params.hf_config, windows, tok, sm.params.train, out, sm.wildcards.model, dev)
    shutil.copyfile(out / "curves.tsv", sm.output.curves)
