from layergeom.io import read_tsv, write_tsv
from layergeom.tokenwise.convergence import tokenwise_convergence
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.seed, threads=sm.threads):
    table = tokenwise_convergence(
        read_tsv(sm.input.anchors), [read_tsv(p) for p in sm.input.tables], sm.params.tokenwise, seed=sm.params.seed
    )
    write_tsv(table, sm.output[0])
