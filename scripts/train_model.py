import shutil
from pathlib import Path

from layergeom import corpus, models, train
from layergeom.runtime import resolve_device
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
tcfg = s["train"]
with job(sm, seed=tcfg["seed"], threads=tcfg["threads"]):
    docs, _ = corpus.read_documents(sm.input.corpus)
    tok = models.load_tokenizer(Path(sm.input.tokenizer).parent)
    windows = corpus.make_windows(docs, tok, None, s["corpus"]["window_tokens"], tcfg["seed"])["tokens"]
    out = Path(sm.output.checkpoints)
    dev = resolve_device(s["device"])
    train.train(sm.params.family, sm.params.hf_config, windows, tok, tcfg, out, sm.wildcards.model, dev)
    shutil.copyfile(out / "curves.tsv", sm.output.curves)
