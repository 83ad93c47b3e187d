import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.plots.topology import plot_coupling_rho, save
from layergeom.topology.communities import read_tsv
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    tables = {c: read_tsv(p) for c, p in zip(sm.params.checkpoints, sm.input)}
    save(plot_coupling_rho(tables, f"{sm.params.label}: topology-dynamics coupling"), sm.output.png, sm.output.pdf)
