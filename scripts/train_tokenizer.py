from pathlib import Path

from layergeom import corpus
from layergeom.workflow import job

with job(snakemake):  # noqa: F821
    docs, _ = corpus.read_documents(snakemake.input[0])  # noqa: F821
    corpus.train_bpe(docs, snakemake.params.vocab_size, Path(snakemake.output[0]).parent)  # noqa: F821
