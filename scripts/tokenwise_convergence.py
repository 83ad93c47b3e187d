from layergeom.io import read_tsv, write_tsv
from layergeom.tokenwise.convergence import tokenwise_convergence
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    table = tokenwise_convergence(
        read_tsv(sm.input.anchors), [read_tsv(p) for p in sm.input.tables], s["tokenwise"], seed=s["seed"]
    )
    write_tsv(table, sm.output[0])
