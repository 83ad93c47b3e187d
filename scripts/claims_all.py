from layergeom.claims.table import gather_claims
from layergeom.io import save_figure, write_tsv
from layergeom.plots.claims import plot_verdict_grid
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    table = gather_claims(sm.input)
    write_tsv(table, sm.output.table)
    save_figure(plot_verdict_grid(table), sm.output.png, sm.output.pdf)
