import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.plots.topology import plot_community_graph, save
from layergeom.topology.communities import read_tsv
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.seed):
    title = f"{sm.params.label} ({sm.wildcards.checkpoint}), boundary {sm.wildcards.boundary}"
    fig = plot_community_graph(read_tsv(sm.input.nodes), read_tsv(sm.input.edges), title, seed=sm.params.seed)
    save(fig, sm.output.png, sm.output.pdf)
