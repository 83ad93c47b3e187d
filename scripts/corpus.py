from layergeom import corpus
from layergeom.workflow import job

with job(snakemake):  # noqa: F821
    cfg = snakemake.params.settings["corpus"]  # noqa: F821
    docs = corpus.load_documents(cfg)
    corpus.write_documents(docs, snakemake.output[0], {"source": cfg["source"], "n_documents": len(docs)})  # noqa: F821
