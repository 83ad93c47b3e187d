from layergeom import dynamics
from layergeom.io import write_tsv
from layergeom.plots import training
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    table = dynamics.dynamics_table(sm.params.results, sm.params.checkpoints)
    write_tsv(table, sm.output.tsv)
    training.dynamics_figure(sm.input.curves, table, sm.output.png, sm.output.pdf, title=sm.wildcards.model)
