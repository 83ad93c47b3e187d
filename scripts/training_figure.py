import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.plots import training
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    table = training.dynamics_table(sm.params.results, sm.params.checkpoints)
    training.write_table(table, sm.output.tsv)
    training.dynamics_figure(sm.input.curves, table, sm.output.png, sm.output.pdf, title=sm.wildcards.model)
