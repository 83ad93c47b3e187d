from layergeom.io import read_tsv, save_figure, write_tsv
from layergeom.plots.topology import plot_significant_counts
from layergeom.topology.coupling import significant_counts
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    counts = significant_counts({tuple(k): read_tsv(p) for k, p in zip(sm.params.runs, sm.input)})
    write_tsv(counts, sm.output.table)
    save_figure(plot_significant_counts(counts), sm.output.png, sm.output.pdf)
