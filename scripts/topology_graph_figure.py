from layergeom.io import read_tsv, save_figure
from layergeom.plots.topology import plot_community_graph
from layergeom.workflow import job

sm = snakemake  # noqa: F821
seed = sm.params.settings["seed"]
with job(sm, seed=seed):
    title = f"{sm.params.label} ({sm.wildcards.checkpoint}), boundary {sm.wildcards.boundary}"
    fig = plot_community_graph(read_tsv(sm.input.nodes), read_tsv(sm.input.edges), title, seed=seed)
    save_figure(fig, sm.output.png, sm.output.pdf)
