from layergeom.io import read_tsv, save_figure
from layergeom.plots.topology import plot_coupling_rho
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    tables = {c: read_tsv(p) for c, p in zip(sm.params.checkpoints, sm.input)}
    save_figure(
        plot_coupling_rho(tables, f"{sm.params.label}: topology-dynamics coupling"), sm.output.png, sm.output.pdf
    )
